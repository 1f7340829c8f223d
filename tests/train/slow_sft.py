"""`beacon train sft` with a pause after each optimizer step, so a test can SIGKILL it mid-run.

The pause changes no number: it only widens the window between steps.
"""

from __future__ import annotations

import sys
import time

from beacon.train.core import train_loop as loop

PAUSE_S = 0.3
_step = loop.optimizer_step


def _slow_step(*args, **kwargs):
    norm = _step(*args, **kwargs)
    time.sleep(PAUSE_S)
    return norm


if __name__ == "__main__":
    loop.optimizer_step = _slow_step
    from beacon.cli import app

    sys.exit(app(["train", "sft", *sys.argv[1:]]))
