"""Helpers shared by the training tests."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[2] / "src"


def run_worker(command: list[str], cwd: Path, timeout: float = 280) -> None:
    """Run a test worker process (this checkout's `beacon`, one intra-op thread); it must exit 0."""
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(
        command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def sft_settings(model: Path, data: Path, out: Path, **train: Any) -> dict[str, Any]:
    """A small SFT config as a dict (tiny model, a few steps)."""
    settings = {
        "output_dir": str(out),
        "max_steps": 6,
        "global_batch_size": 4,
        "lr": 1e-3,
        "save_every": 2,
        "max_tokens_per_microbatch": 1000,
        "progress_bar": False,
    }
    settings.update(train)
    return {
        "model": {"path": str(model)},
        "data": {"train": [str(data / "trajs.jsonl")], "images": str(data / "images")},
        "train": settings,
    }
