"""The text every report is made of: one markdown table writer, one interval format, and the
one writer of a report's files (`report.md` beside `report.json`).

Eval, training and demo reports render through these, so a table or an interval reads the
same in every `report.md`.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

logger = logging.getLogger(__name__)
REPORT_FILE = "report.md"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A markdown table's lines: the one table writer of every report (eval, training, demo)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def format_interval(
    point: float,
    low: float = math.nan,
    high: float = math.nan,
    spec: str = "{:.2f}",
    undefined: str = "—",
) -> str:
    """`61.2 [58.0, 64.1]`: a point estimate and its confidence interval, each with `spec`.

    `undefined` stands for a NaN point (no items to estimate it from); a point without an
    interval (NaN bounds: no bootstrap) is shown alone, never with empty brackets.
    """
    if math.isnan(point):
        return undefined
    text = spec.format(point)
    if math.isnan(low) or math.isnan(high):
        return text
    return f"{text} [{spec.format(low)}, {spec.format(high)}]"


def write_report_files(out_dir: Path, text: str, payload: Mapping, plots: int) -> Path:
    """Write `out_dir/report.md` (`text`) and `report.json` (`payload`: one entry per run, NaN
    refused, so a reader never meets a bare NaN); returns report.md."""
    report = out_dir / REPORT_FILE
    report.write_text(text + "\n", encoding="utf-8")
    (out_dir / "report.json").write_text(
        json.dumps(payload, indent=1, allow_nan=False), encoding="utf-8"
    )
    logger.info("wrote %s (%d runs, %d plots)", report, len(payload), plots)
    return report
