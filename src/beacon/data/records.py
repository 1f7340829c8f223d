"""The typed records the data stages exchange.

Every stage writes `summary.json` (a `StageSummary`: items in, kept, dropped by reason) next to
its outputs. Files a stage derives from finished eval runs are rewritten whole
(`beacon.jsonl.write_jsonl_atomic`), so a stage killed at any moment leaves the old file or the
new one, never half of one; the slow part of every stage (the eval run, the hint requests)
resumes from its own append-only JSONL.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from beacon.jsonl import write_atomic
from beacon.runfolder import SUMMARY_FILE


@dataclass
class ItemRef:
    """One training item, as the stages name it."""

    benchmark: str
    sample_id: str

    @property
    def key(self) -> str:
        return f"{self.benchmark}/{self.sample_id}"


@dataclass
class StageSummary:
    """What one stage did: how many items came in, how many it kept, and why it dropped others."""

    stage: str
    total: int = 0
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def write(self, folder: Path) -> Path:
        path = folder / SUMMARY_FILE
        write_atomic(path, json.dumps(asdict(self), indent=2) + "\n")
        return path

    def line(self) -> str:
        """One log line: `difficulty: kept 7 of 20 (too_easy 13)`."""
        why = ", ".join(f"{k} {v}" for k, v in sorted(self.dropped.items()))
        return f"{self.stage}: kept {self.kept} of {self.total}" + (f" ({why})" if why else "")
