"""`beacon eval` end to end on the tiny model and `synth`: killed with SIGKILL mid-run and
resumed, it ends with the same records and summary as an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

LIMIT = 5
MODES = ("tool", "notool")


def eval_cmd(out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "beacon.cli",
        "eval",
        "--bench",
        "synth",
        "--modes",
        ",".join(MODES),
        "--limit",
        str(LIMIT),
        "--concurrency",
        "1",
        "--out",
        str(out),
        "--no-progress",
        "--set",
        "agent.max_new_tokens_per_turn=24",
        "--set",
        "agent.max_total_new_tokens=48",
        "--set",
        "bootstrap=200",
    ]


def records(out: Path) -> dict[str, dict]:
    lines = (out / "samples.jsonl").read_text().splitlines()
    parsed = [json.loads(line) for line in lines]
    keys = [r["key"] for r in parsed]
    assert len(keys) == len(set(keys)), "duplicate samples after resume"
    for record in parsed:
        record.pop("wall_time_s")
    return {r["key"]: r for r in parsed}


def strip_timing(tree: object) -> object:
    if isinstance(tree, dict):
        return {k: strip_timing(v) for k, v in tree.items() if "wall" not in k}
    if isinstance(tree, list):
        return [strip_timing(v) for v in tree]
    return tree


def run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
def test_killed_and_resumed_run_equals_uninterrupted(tmp_path: Path, tiny_model_path: Path) -> None:
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    run(eval_cmd(whole))

    proc = subprocess.Popen(eval_cmd(resumed), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    samples = resumed / "samples.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if samples.exists() and samples.read_text().count("\n") >= 3:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = samples.read_text().count("\n")
    assert 3 <= partial < LIMIT * len(MODES)

    run(eval_cmd(resumed))

    expected = records(whole)
    assert len(expected) == LIMIT * len(MODES)
    assert records(resumed) == expected
    summary_whole = json.loads((whole / "summary.json").read_text())
    summary_resumed = json.loads((resumed / "summary.json").read_text())
    assert strip_timing(summary_resumed) == strip_timing(summary_whole)
    assert (resumed / "report.md").exists()
    trajectories = [
        json.loads(line)["key"]
        for line in (resumed / "trajectories.jsonl").read_text().splitlines()
    ]
    assert sorted(trajectories) == sorted(expected)


def test_changed_settings_are_refused(tmp_path: Path, tiny_model_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.yaml").write_text("engine:\n  model: some/other-model\n")
    cmd = [sys.executable, "-m", "beacon.cli", "eval", "--out", str(out), "--limit", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert "engine.model" in done.stderr and "new --out" in done.stderr


def test_bad_settings_are_all_reported_before_loading(tmp_path: Path) -> None:
    cmd = [
        sys.executable, "-m", "beacon.cli", "eval", "--out", str(tmp_path / "x"),
        "--modes", "tool,sometimes", "--samples", "0", "--set", "agent.max_turn=3",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    for fragment in ("modes", "samples", "agent.max_turn", "max_turns"):
        assert fragment in done.stderr
    assert not (tmp_path / "x").exists()
