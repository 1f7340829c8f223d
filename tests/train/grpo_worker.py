"""`beacon train grpo` with the test's scripted-choice sampler and a pause after each optimizer
step, so a test can SIGKILL it mid-run. The pause changes no number."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from grpo_helpers import install_choice_processor

from beacon.train.core import loop

_step = loop.optimizer_step


def _slow_step(*args, **kwargs):
    norm = _step(*args, **kwargs)
    time.sleep(0.3)
    return norm


if __name__ == "__main__":
    loop.optimizer_step = _slow_step
    install_choice_processor()
    from beacon.cli import app

    sys.exit(app(["train", "grpo", *sys.argv[1:]]))
