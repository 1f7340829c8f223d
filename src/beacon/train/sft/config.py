"""Settings of `beacon train sft`: the model and loop sections every trainer shares, and `data:`."""

from __future__ import annotations

from pydantic import Field

from beacon.config import StrictModel
from beacon.train.core.config import ModelConfig, TrainConfig


class DataConfig(StrictModel):
    """Where the trajectories and their images are."""

    train: list[str] = Field(
        ..., min_length=1, description="Trajectory JSONL files (one Trajectory per line)."
    )
    images: str | None = Field(
        None, description="ImageStore folder holding the trajectories' images by key."
    )
    max_length: int = Field(
        4096, ge=8, description="Trajectories longer than this many tokens are dropped (counted)."
    )


class SFTConfig(StrictModel):
    """Cold-start SFT: cross-entropy on generated segments only (beacon.md §3)."""

    model: ModelConfig
    data: DataConfig
    train: TrainConfig
