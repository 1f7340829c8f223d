"""The hints stage killed with SIGKILL mid-run resumes to the same hints.jsonl as an
uninterrupted run: every item decided exactly once, nothing lost, nothing duplicated."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from beacon.data.eval_stages import run_expert
from beacon.data.hint_writing import run_hints

from .conftest import POOL, SHIPPED, data_config, overrides, select_all


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_hints_resume_after_kill(tmp_path, scripted_server):
    server = scripted_server(delay_s=0.3)  # slow enough to kill between two hints
    extra = ("expert.concurrency=1",)
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    cfg = data_config(killed, server.base_url, *extra)
    select_all(cfg)
    run_expert(cfg, progress=False)
    shutil.copytree(killed, clean)

    cmd = [sys.executable, "-m", "beacon.cli", "data", "hints", "-c", str(SHIPPED)]
    cmd += [a for o in overrides(killed, server.base_url, *extra) for a in ("--set", o)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    path = killed / "hints" / "hints.jsonl"
    deadline = time.monotonic() + 120
    while not (path.exists() and path.read_text().count("\n") >= 2):
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, "the hints stage wrote nothing in 120 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(lines(path)) < POOL, "finished before the kill; raise delay_s"

    resumed = run_hints(cfg, progress=False)
    uninterrupted = run_hints(data_config(clean, server.base_url, *extra), progress=False)
    got, want = lines(path), lines(clean / "hints" / "hints.jsonl")
    keys = [r["sample_id"] for r in got]
    assert len(keys) == len(set(keys)) == POOL
    assert sorted(got, key=lambda r: r["sample_id"]) == sorted(want, key=lambda r: r["sample_id"])
    assert resumed == uninterrupted
