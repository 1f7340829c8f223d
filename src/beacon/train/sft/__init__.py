"""`beacon train sft`: cold-start SFT on trajectories (beacon.md §3)."""

from beacon.train.sft.config import DataConfig, SFTConfig
from beacon.train.sft.recipe import read_trajectories, run_sft

__all__ = ["DataConfig", "SFTConfig", "read_trajectories", "run_sft"]
