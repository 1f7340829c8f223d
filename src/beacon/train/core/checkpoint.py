"""Atomic checkpoints: `RUN/checkpoint-N/` is either complete or absent.

A checkpoint folder holds

- the model in `save_pretrained` format plus the processor files, so every engine loads it by
  path (`beacon eval --model RUN/checkpoint-N`); with LoRA, the merged weights;
- `state/`: `accelerator.save_state` (model, optimizer, scheduler, every process's RNG states),
  which also handles sharded FSDP / DeepSpeed states;
- `train_state.json`: step and data position;
- `COMPLETE`: written last.

All processes write into `.checkpoint-N.tmp/`; the main process writes `COMPLETE` and renames
the folder to `checkpoint-N` only after every process has finished writing. A run killed at any
moment leaves either a complete `checkpoint-N` or a temporary folder that resume ignores and
deletes, so a torn checkpoint is never loaded.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

COMPLETE = "COMPLETE"
STATE_DIR = "state"
TRAIN_STATE = "train_state.json"
_NAME = re.compile(r"^checkpoint-(\d+)$")


@dataclass
class TrainState:
    """Where the run stands after `step` optimizer steps.

    `samples_seen` is the data position: the next step starts at this index of the seeded,
    per-epoch shuffled stream of trajectories.
    """

    step: int
    samples_seen: int

    def write(self, folder: Path) -> None:
        (folder / TRAIN_STATE).write_text(json.dumps(asdict(self)) + "\n")

    @classmethod
    def read(cls, folder: Path) -> TrainState:
        return cls(**json.loads((folder / TRAIN_STATE).read_text()))


def staging_dir(run_dir: Path, step: int) -> Path:
    return run_dir / f".checkpoint-{step}.tmp"


def final_dir(run_dir: Path, step: int) -> Path:
    return run_dir / f"checkpoint-{step}"


def commit(run_dir: Path, step: int) -> Path:
    """Mark the staged checkpoint complete and move it into place (main process only)."""
    staging, final = staging_dir(run_dir, step), final_dir(run_dir, step)
    marker = staging / COMPLETE
    marker.write_text("ok\n")
    _fsync_dir(staging)
    if final.exists():  # a re-run of the same step after resume: replace the older copy
        shutil.rmtree(final)
    os.replace(staging, final)
    _fsync_dir(run_dir)
    return final


def complete_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every complete checkpoint in `run_dir`, oldest first."""
    found = []
    if not run_dir.exists():
        return found
    for child in run_dir.iterdir():
        match = _NAME.match(child.name)
        if match and (child / COMPLETE).exists():
            found.append((int(match.group(1)), child))
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint, or None; incomplete folders are never returned."""
    found = complete_checkpoints(run_dir)
    return found[-1][1] if found else None


def remove_stale(run_dir: Path) -> None:
    """Delete staging folders and marker-less checkpoint folders left by a killed run."""
    if not run_dir.exists():
        return
    for child in run_dir.iterdir():
        torn = _NAME.match(child.name) and not (child / COMPLETE).exists()
        staged = child.name.startswith(".checkpoint-") and child.name.endswith(".tmp")
        if child.is_dir() and (torn or staged):
            logger.warning("removing incomplete checkpoint folder %s", child)
            shutil.rmtree(child, ignore_errors=True)


def prune(run_dir: Path, keep_last: int) -> None:
    """Keep the newest `keep_last` complete checkpoints."""
    for _, folder in complete_checkpoints(run_dir)[:-keep_last]:
        shutil.rmtree(folder, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
