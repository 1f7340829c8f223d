"""pass@k difficulty selection (beacon.md §2): keep the items the base model rarely solves.

Sample the base model K times per item (one eval run, `samples = K`), count the correct samples
c_i of item i, and keep i when c_i <= max_correct (SFT: c_i <= 2 of 5; RL: c_i <= 3 of 5).

Deviation, stated: an item with a sample that failed for a reason outside the model (engine,
sandbox or input error) or with fewer than K samples is dropped, not counted as wrong: a broken
server would otherwise make every item look hard.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from beacon.data.records import ItemRef, StageSummary
from beacon.rollout import FAILED_OUTSIDE_MODEL


@dataclass
class PassCount:
    """The K samples of one item: how many were correct, how many failed outside the model."""

    item: ItemRef
    samples: int = 0
    correct: int = 0
    failed: int = 0
    keys: list[str] = field(default_factory=list)


def pass_counts(records: Iterable[Mapping[str, Any]], mode: str) -> dict[str, PassCount]:
    """Per-item counts from samples.jsonl records (fields benchmark, sample_id, mode, correct)."""
    counts: dict[str, PassCount] = {}
    for r in records:
        if r["mode"] != mode:
            continue
        item = ItemRef(r["benchmark"], str(r["sample_id"]))
        entry = counts.setdefault(item.key, PassCount(item))
        entry.samples += 1
        entry.correct += int(bool(r["correct"]))
        entry.failed += int(r.get("finish_reason") in FAILED_OUTSIDE_MODEL)
        entry.keys.append(r["key"])
    return counts


@dataclass
class Selection:
    """The kept items and the counts of the choice."""

    kept: list[PassCount]
    summary: StageSummary


def select_hard(counts: Mapping[str, PassCount], k: int, max_correct: int) -> Selection:
    """Items with c_i <= max_correct out of k clean samples, and the summary of the choice."""
    summary = StageSummary(stage="difficulty", total=len(counts))
    kept = []
    for key in sorted(counts):
        entry = counts[key]
        if entry.samples < k:
            summary.drop("incomplete")
        elif entry.failed:
            summary.drop("sample_failed")
        elif entry.correct > max_correct:
            summary.drop("too_easy")
        else:
            kept.append(entry)
    summary.kept = len(kept)
    histogram = [0] * (k + 1)
    for entry in counts.values():
        histogram[min(entry.correct, k)] += 1
    summary.extra = {"k": k, "max_correct": max_correct, "correct_histogram": histogram}
    return Selection(kept=kept, summary=summary)
