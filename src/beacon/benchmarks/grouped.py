"""Consistency metrics over groups of records (circular evaluation, question pairs, figures).

A group counts as correct only when every record in it is correct. With K samples per item,
records are grouped by (group id, k): sample k of every member forms one attempt at the group,
and the metric is the mean over those attempts, so K > 1 estimates the same quantity as K = 1.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any


def accuracy(records: Sequence[Mapping[str, Any]]) -> float:
    """Fraction of records with `correct` true; 0.0 for no records."""
    return sum(bool(r.get("correct")) for r in records) / len(records) if records else 0.0


def group_accuracy(records: Sequence[Mapping[str, Any]], key: str) -> float:
    """Fraction of groups `meta[key]` (per sample index k) whose records are all correct.

    Records whose `meta[key]` is None are not in any group (e.g. HallusionBench questions
    without a figure for the figure metric).
    """
    groups: dict[tuple[Any, Any], bool] = defaultdict(lambda: True)
    for record in records:
        group = (record.get("meta") or {}).get(key)
        if group is None:
            continue
        slot = (group, record.get("k", 0))
        groups[slot] = groups[slot] and bool(record.get("correct"))
    return sum(groups.values()) / len(groups) if groups else 0.0


def group_count(records: Sequence[Mapping[str, Any]], key: str) -> int:
    """Number of distinct groups `meta[key]` among the records."""
    return len({(r.get("meta") or {}).get(key) for r in records} - {None})
