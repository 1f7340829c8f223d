"""The label log: an append-only JSONL the page writes as each label is made.

Every save appends one line `{"id", "annotator", "stage", "note", "time"}`, under an exclusive
`flock` on the file (so two servers, or two annotators on one server, never interleave a line)
and fsynced before the request returns (so a closed browser or a killed server loses nothing).
The current label of a rollout is the **last line per (annotator, id)**: each annotator keeps
their own labels, which is what inter-annotator agreement needs, and a relabel overrides the
earlier one without rewriting the file. The file follows `beacon.jsonl`'s policy: a torn last
line (a crash mid-write) is skipped on read and cut off before the next label is appended.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from pathlib import Path

from beacon.annotate.records import HumanLabel
from beacon.jsonl import read_jsonl, repair_jsonl


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
        with self._lock, self.path.open("a+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                size = f.seek(0, os.SEEK_END)
                if size and os.pread(f.fileno(), 1, size - 1) != b"\n":
                    repair_jsonl(self.path)  # a writer died mid-line: cut it before appending
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
        return entry

    def entries(self) -> list[dict]:
        """Every complete line, in write order (a line being appended is not complete yet)."""
        return list(read_jsonl(self.path))

    def latest(self, annotator: str | None = None) -> dict[str, dict]:
        """The current label of each rollout id (last write wins), for one annotator or all.

        With `annotator=None` the result is keyed by id and holds the last write by anyone.
        """
        current: dict[str, dict] = {}
        for entry in self.entries():
            if annotator is None or entry.get("annotator") == annotator:
                current[entry["id"]] = entry
        return current
