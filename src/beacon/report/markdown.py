"""The text every report is made of: one markdown table writer and one interval format.

Eval, training and demo reports render through these two, so a table or an interval reads the
same in every `report.md`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


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
