"""The label log: an append-only JSONL the page writes as each label is made.

Every save appends one line `{"id", "annotator", "stage", "note", "time"}`, under an exclusive
`flock` on the file (so two servers, or two annotators on one server, never interleave a line)
and fsynced before the request returns (so a closed browser or a killed server loses nothing).
The current label of a rollout is the **last line per (annotator, id)**: each annotator keeps
their own labels, which is what inter-annotator agreement needs, and a relabel overrides the
earlier one without rewriting the file. A torn last line (a crash mid-write) is skipped on read.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from pathlib import Path

from beacon.annotate.records import HumanLabel

logger = logging.getLogger(__name__)


class LabelLog:
    """Append-only labels at `path`; safe across threads and processes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch(exist_ok=True)
        self._lock = threading.Lock()

    def append(self, row_id: str, label: HumanLabel) -> dict:
        """Write one label durably and return the stored line."""
        entry = {
            "id": row_id,
            "annotator": label.annotator,
            "stage": label.stage,
            "note": label.note,
            "time": round(time.time(), 3),
        }
        data = (json.dumps(entry, ensure_ascii=False) + "\n").encode()
        with self._lock, self.path.open("ab") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
        return entry

    def entries(self) -> list[dict]:
        """Every complete line, in write order."""
        with self.path.open("rb") as f:
            fcntl.flock(f, fcntl.LOCK_SH)
            try:
                raw = f.read()
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
        out = []
        for line in raw.split(b"\n")[:-1]:  # the part after the last newline is torn or empty
            try:
                out.append(json.loads(line))
            except ValueError:
                logger.warning("skipping an unparsable line in %s", self.path)
        return out

    def latest(self, annotator: str | None = None) -> dict[str, dict]:
        """The current label of each rollout id (last write wins), for one annotator or all.

        With `annotator=None` the result is keyed by id and holds the last write by anyone.
        """
        current: dict[str, dict] = {}
        for entry in self.entries():
            if annotator is None or entry.get("annotator") == annotator:
                current[entry["id"]] = entry
        return current
