"""`beacon train opd`: on-policy distillation with ReVuE's reflections and token weights."""

from beacon.train.opd.config import OPDConfig
from beacon.train.opd.recipe import run_opd

__all__ = ["OPDConfig", "run_opd"]
