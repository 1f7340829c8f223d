"""The typed records the data stages exchange.

Every stage writes `summary.json` (a `StageSummary`: items in, kept, dropped by reason) next to
its outputs. Files a stage derives from finished eval runs are rewritten whole
(`beacon.jsonl.write_jsonl_atomic`), so a stage killed at any moment leaves the old file or the
new one, never half of one; the slow part of every stage (the eval run, the hint requests)
resumes from its own append-only JSONL.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from beacon.jsonl import write_jsonl_atomic
from beacon.runfolder import write_summary

SFT_FILE = "trajectories.jsonl"
"""A training set's rows (one `Trajectory` JSON a line), beside the `images/` store they name."""


def write_training_set(
    folder: Path, rows: list[dict[str, Any]], counts: Mapping[str, int]
) -> dict[str, int]:
    """`folder/SFT_FILE` holding `rows`, then its summary (written last: a set with a summary is
    whole): the row count and `counts`, sorted by name. Returns the summary."""
    write_jsonl_atomic(folder / SFT_FILE, rows)
    summary = {"rows": len(rows), **dict(sorted(counts.items()))}
    write_summary(folder, summary)
    return summary


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

    def write(self, folder: Path) -> None:
        write_summary(folder, asdict(self))

    def line(self) -> str:
        """One log line: `difficulty: kept 7 of 20 (too_easy 13)`."""
        why = ", ".join(f"{k} {v}" for k, v in sorted(self.dropped.items()))
        return f"{self.stage}: kept {self.kept} of {self.total}" + (f" ({why})" if why else "")
