"""`run_grpo` of the YAML config in argv[1] with the tests' scripted-choice sampler and a pause
after each optimizer step, so a test can SIGKILL it mid-run. The pause changes no number."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from grpo_helpers import choice_processors

from beacon.train.core import train_loop as loop

_step = loop.optimizer_step


def _slow_step(*args, **kwargs):
    norm = _step(*args, **kwargs)
    time.sleep(0.3)
    return norm


if __name__ == "__main__":
    loop.optimizer_step = _slow_step
    from beacon.config import load_config
    from beacon.train.grpo import GRPOConfig, run_grpo

    run_grpo(load_config(GRPOConfig, sys.argv[1]), logits_processors=choice_processors)
