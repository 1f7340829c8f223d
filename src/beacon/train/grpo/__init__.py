"""`beacon train grpo`: GRPO with the NAAR reward and HGCE hints (beacon.md §4)."""

from beacon.train.grpo.config import GRPOConfig
from beacon.train.grpo.recipe import run_grpo

__all__ = ["GRPOConfig", "run_grpo"]
