"""Append-only JSONL files that survive `kill -9`, and the run folder's two of them.

A record is committed when its line, newline included, is flushed and fsynced. A run killed
mid-write leaves at most one torn last line; `repair_jsonl` cuts it off before the run appends
again, so a resumed run neither duplicates nor drops a sample. The trajectory of a sample is
written before its record: a trajectory without a record (killed in between) is dropped at
resume and redone with its sample.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

SAMPLES_FILE = "samples.jsonl"
TRAJECTORIES_FILE = "trajectories.jsonl"


def repair_jsonl(path: Path) -> int:
    """Cut a torn (unterminated or unparsable) last line off `path`; return bytes removed."""
    if not path.exists():
        return 0
    size = path.stat().st_size
    with path.open("rb+") as f:
        if size == 0:
            return 0
        tail_start = max(0, size - (1 << 20))
        f.seek(tail_start)
        tail = f.read()
        keep = _last_good_end(tail, tail_start == 0)
        if keep == len(tail):
            return 0
        f.truncate(tail_start + keep)
    logger.warning("cut a torn last line (%d bytes) off %s", len(tail) - keep, path)
    return len(tail) - keep


def _last_good_end(tail: bytes, from_file_start: bool) -> int:
    """Length of `tail` up to the end of its last complete, parsable line."""
    end = len(tail)
    if not tail.endswith(b"\n"):
        end = tail.rfind(b"\n") + 1
        if end == 0 and not from_file_start:
            return len(tail)  # one huge line that started before the window: leave it
    line_start = tail.rfind(b"\n", 0, max(0, end - 1)) + 1
    if end > line_start:
        try:
            json.loads(tail[line_start:end])
        except ValueError:
            return line_start
    return end


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Parsed lines of `path`; a torn last line (a run still writing, or killed) is skipped."""
    if not path.exists():
        return
    with path.open("rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                return
            try:
                yield json.loads(raw)
            except ValueError:
                logger.warning("skipping an unparsable line in %s", path)


class JsonlWriter:
    """Thread-safe appender that makes each line durable before returning."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = path.open("ab")
        self._lock = threading.Lock()

    def write(self, obj: dict[str, Any] | str) -> None:
        line = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
        data = (line + "\n").encode()
        with self._lock:
            self._file.write(data)
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            self._file.close()


def prepare_resume(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Make the run folder consistent after a crash; return the committed records by key.

    Torn lines are cut from both files; trajectories whose sample record never landed are
    removed (their samples run again).
    """
    samples, trajectories = run_dir / SAMPLES_FILE, run_dir / TRAJECTORIES_FILE
    repair_jsonl(samples)
    repair_jsonl(trajectories)
    done: dict[str, dict[str, Any]] = {}
    for record in read_jsonl(samples):
        done[record["key"]] = record
    _drop_orphan_trajectories(trajectories, set(done))
    return done


def _drop_orphan_trajectories(path: Path, keep: set[str]) -> None:
    if not path.exists():
        return
    orphans = 0
    tmp = path.with_suffix(".jsonl.tmp")
    seen: set[str] = set()
    with path.open("rb") as src, tmp.open("wb") as dst:
        for raw in src:
            key = json.loads(raw).get("key")
            if key in keep and key not in seen:
                seen.add(key)
                dst.write(raw)
            else:
                orphans += 1
    if orphans:
        os.replace(tmp, path)
        logger.info("dropped %d trajectories of unfinished samples from %s", orphans, path)
    else:
        tmp.unlink()


def load_trajectory(run_dir: Path, key: str) -> dict[str, Any] | None:
    """The trajectory stored for `key` in a run folder (a linear scan; for inspection)."""
    for line in read_jsonl(run_dir / TRAJECTORIES_FILE):
        if line.get("key") == key:
            return line["trajectory"]
    return None
