"""OPD under `accelerate launch` with 2 CPU processes (gloo) repeats the one-process run: each
process rolls out its share of a step's items with its own teacher and critic client, the
gradient is summed once per step, and the records are gathered, so the metrics, the loss and
the weights equal the one-process run's up to float summation order. Killed (SIGKILL) after its
first checkpoint and resumed, the 2-process run repeats itself exactly."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from beacon.train.core.metrics import read_metrics

from .opd_helpers import opd_settings

WORKER = Path(__file__).with_name("opd_worker.py")
SRC = Path(__file__).resolve().parents[2] / "src"
SAME = ("step", "retained", "loss_tokens", "accuracy", "coverage_complete", "target_reflected")


def _command(processes: int, config: dict, *args: str) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env["OMP_NUM_THREADS"] = "1"
    command = [sys.executable, str(WORKER), json.dumps(config), *args]
    if processes > 1:
        command = [shutil.which("accelerate"), "launch", "--cpu", "--num_processes", "2"]
        command += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
        command += [str(WORKER), json.dumps(config), *args]
    return command, env


def launch(processes: int, config: dict, cwd: Path, *args: str) -> Path:
    command, env = _command(processes, config, *args)
    proc = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(config["train"]["output_dir"])


def kill_after_first_checkpoint(config: dict, cwd: Path) -> None:
    """Start the 2-process run and SIGKILL the launcher and its workers once checkpoint-1 is
    complete."""
    command, env = _command(2, config)
    proc = subprocess.Popen(
        command,
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    done = Path(config["train"]["output_dir"]) / "checkpoint-1" / "COMPLETE"
    deadline = time.monotonic() + 240
    while not done.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint-1 written"
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("accelerate") is None, reason="accelerate CLI not installed")
def test_two_processes_repeat_the_one_process_run_and_resume_exactly(
    tiny_model_path: Path, teacher_path: Path, tmp_path: Path
) -> None:
    def settings(run: str, save_every: int = 2) -> dict:
        cfg = opd_settings(tiny_model_path, teacher_path, tmp_path / run)
        cfg["rollout"]["group_size"] = 2
        cfg["train"]["save_every"] = save_every
        return cfg

    runs = {n: launch(n, settings(f"p{n}"), tmp_path) for n in (1, 2)}
    one, two = (read_metrics(runs[n] / "metrics.jsonl") for n in (1, 2))
    assert len(one) == len(two) == 2 and all(m["retained"] == 4 for m in one)
    for a, b in zip(one, two, strict=True):
        assert {k: a[k] for k in SAME} == {k: b[k] for k in SAME}
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
    records = [(runs[n] / "revue.jsonl").read_text().splitlines() for n in (1, 2)]
    keys = [[(r["step"], r["group"], r["slot"]) for r in map(json.loads, rs)] for rs in records]
    assert keys[0] == keys[1] and len(keys[0]) == 8  # written once, by the main process
    a, b = (load_file(runs[n] / "checkpoint-2" / "model.safetensors") for n in (1, 2))
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-4, atol=1e-6, msg=name)

    killed = settings("killed", save_every=1)
    kill_after_first_checkpoint(killed, tmp_path)
    resumed = launch(2, killed, tmp_path, "resume")
    got = read_metrics(resumed / "metrics.jsonl")
    assert [m["step"] for m in got] == [1, 2]
    for key in ("loss", "grad_norm", "loss_tokens", "impact_sparsity", "coverage_complete"):
        assert [m[key] for m in got] == [m[key] for m in two], key
    c = load_file(resumed / "checkpoint-2" / "model.safetensors")
    assert all(torch.equal(c[name], b[name]) for name in b)
    lines = (resumed / "revue.jsonl").read_text().splitlines()
    assert [json.loads(x)["loss"] for x in lines] == [json.loads(x)["loss"] for x in records[1]]
