"""GRPO under `accelerate launch` with 2 CPU processes (gloo DDP) repeats the one-process run:
the same rollouts, rewards and groups kept, the same loss up to float summation order."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from beacon.train.core.metrics import read_metrics

from .grpo_helpers import grpo_settings

WORKER = Path(__file__).with_name("grpo_ddp_worker.py")
SRC = Path(__file__).resolve().parents[2] / "src"
SAME = ("step", "sequences", "loss_tokens", "rl/reward_mean", "rl/accuracy", "rl/groups_kept")


def _launch(processes: int, config: dict, tmp_path: Path) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env["OMP_NUM_THREADS"] = "1"
    if processes == 1:
        command = [sys.executable, str(WORKER), json.dumps(config)]
    else:
        command = [shutil.which("accelerate"), "launch", "--cpu", "--num_processes", "2"]
        command += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
        command += [str(WORKER), json.dumps(config)]
    proc = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=280
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return read_metrics(Path(config["train"]["output_dir"]) / "metrics.jsonl")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("accelerate") is None, reason="accelerate CLI not installed")
def test_two_processes_repeat_the_one_process_run(tmp_path: Path) -> None:
    one = _launch(1, grpo_settings(tmp_path / "one", max_steps=2, save_every=2), tmp_path)
    two = _launch(2, grpo_settings(tmp_path / "two", max_steps=2, save_every=2), tmp_path)
    assert len(one) == len(two) == 2
    assert any(m["sequences"] > 0 for m in one)
    for a, b in zip(one, two, strict=True):
        assert {k: a[k] for k in SAME} == {k: b[k] for k in SAME}
        # float32 sums in another order (per process, then all-reduced)
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4, abs=1e-6)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-3)
