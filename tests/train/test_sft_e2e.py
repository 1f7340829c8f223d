"""SFT on the tiny model end to end: the loss falls, checkpoints load as models, and a run
killed with SIGKILL and resumed gives the per-step losses of an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from beacon.train.core.checkpoint import latest_checkpoint
from beacon.train.core.metrics import read_metrics
from beacon.train.sft import SFTConfig, run_sft

from .helpers import sft_settings

SLOW_SFT = Path(__file__).with_name("slow_sft.py")
SRC = Path(__file__).resolve().parents[2] / "src"


def _losses(run: Path) -> list[tuple[int, float]]:
    return [(m["step"], m["loss"]) for m in read_metrics(run / "metrics.jsonl")]


@pytest.mark.slow
def test_sft_loss_falls_and_checkpoint_loads(
    tiny_model_path: Path, train_data: Path, tmp_path: Path
) -> None:
    # the global batch is the whole set, so every step's loss is over the same 8 trajectories
    run = tmp_path / "run"
    cfg = SFTConfig.model_validate(
        sft_settings(
            tiny_model_path, train_data, run, max_steps=12, global_batch_size=8, save_every=6
        )
    )
    state = run_sft(cfg)
    assert state.step == 12
    losses = [loss for _, loss in _losses(run)]
    assert len(losses) == 12
    assert losses[-1] < 0.7 * losses[0], losses
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert SFTConfig.model_validate(saved) == cfg
    checkpoint = latest_checkpoint(run)
    assert checkpoint is not None and checkpoint.name == "checkpoint-12"

    from beacon.engines import load_engine

    engine = load_engine("hf", str(checkpoint))  # what `beacon eval --model RUN/checkpoint-N` does
    assert engine is not None


@pytest.mark.slow
def test_kill_and_resume_gives_the_uninterrupted_losses(
    tiny_model_path: Path, train_data: Path, tmp_path: Path
) -> None:
    settings = dict(max_steps=8, global_batch_size=4, save_every=2, keep_last=2)
    straight = tmp_path / "straight"
    run_sft(
        SFTConfig.model_validate(sft_settings(tiny_model_path, train_data, straight, **settings))
    )

    killed = tmp_path / "killed"
    config = tmp_path / "killed.yaml"
    config.write_text(yaml.safe_dump(sft_settings(tiny_model_path, train_data, killed, **settings)))
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.Popen(
        [sys.executable, str(SLOW_SFT), "--config", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 180
    while not any(step >= 5 for step, _ in _losses(killed)):
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert latest_checkpoint(killed).name == "checkpoint-4"

    cfg = SFTConfig.model_validate(sft_settings(tiny_model_path, train_data, killed, **settings))
    run_sft(cfg, resume=True)
    assert _losses(killed) == _losses(straight)
    assert len(_losses(killed)) == 8
