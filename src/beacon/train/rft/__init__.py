"""`beacon train rft`: SFT on the teacher's verified trajectories (the ReVuE paper's baseline)."""

from beacon.train.rft.config import RFTConfig
from beacon.train.rft.recipe import run_rft

__all__ = ["RFTConfig", "run_rft"]
