"""Helpers shared by the training tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any


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
