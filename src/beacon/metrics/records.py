"""From ``samples.jsonl`` records (one per item × mode × sample k) to per-item and per-mode numbers.

A record follows the evaluation record schema (`beacon eval`): ``benchmark``, ``sample_id``,
``mode``, ``k``, ``category``, ``difficulty``, ``correct``, ``score``, ``parsed``, ``used_tool``,
``tool_calls``, ``attempted_tool_calls``, ``response_tokens``, ``code_tokens``, ``error``, ...

Per-mode statistics are ratios of sums over samples (`MODE_STATS`): accuracy is correct samples /
samples. With the same K for every item this equals the mean of per-item means; a bootstrap
resamples whole items (all K samples of an item together), because samples of one item are not
independent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

logger = logging.getLogger(__name__)

TOOL_MODE = "tool"
NOTOOL_MODE = "notool"

ItemKey = tuple[str, str]
"""(benchmark, sample_id): one benchmark item."""


def required(record: Mapping, field: str):
    """record[field], or a ValueError that names the record and the schema it must follow."""
    if field not in record:
        raise ValueError(
            f"record {record.get('key', dict(record))!r} has no {field!r}; samples.jsonl records "
            "need benchmark, sample_id, mode, k and correct (see the evaluation record schema)."
        )
    return record[field]


def record_id(record: Mapping) -> tuple[str, str, str, str]:
    """(benchmark, sample_id, mode, k): what makes a record unique (its ``key`` in the schema)."""
    return (
        str(record.get("benchmark", "")),
        str(required(record, "sample_id")),
        str(required(record, "mode")),
        str(record.get("k", 0)),
    )


def dedupe(records: Iterable[Mapping]) -> list[Mapping]:
    """Drop repeated (benchmark, sample_id, mode, k) records, keeping the first; logs the count."""
    seen: set[tuple[str, str, str, str]] = set()
    kept, dropped = [], 0
    for record in records:
        rid = record_id(record)
        if rid in seen:
            dropped += 1
            continue
        seen.add(rid)
        kept.append(record)
    if dropped:
        logger.warning("dropped %d duplicate records (same benchmark, sample_id, mode, k)", dropped)
    return kept


def group_by_item(records: Iterable[Mapping]) -> dict[ItemKey, dict[str, list[Mapping]]]:
    """{(benchmark, sample_id): {mode: [its records, sorted by k]}}, items sorted by key.

    Sorted, not in the order records were written: that is the order episodes finished in, and
    a bootstrap over the items must resample the same items however the run was batched.
    """
    groups: dict[ItemKey, dict[str, list[Mapping]]] = {}
    for record in records:
        benchmark, sample_id, mode, _ = record_id(record)
        groups.setdefault((benchmark, sample_id), {}).setdefault(mode, []).append(record)
    for modes in groups.values():
        for samples in modes.values():
            samples.sort(key=lambda r: int(r.get("k", 0)))
    return dict(sorted(groups.items()))


def _first_not_none(samples: Iterable[Mapping], key: str):
    return next((r[key] for r in samples if r.get(key) is not None), None)


def _mean(samples: list[Mapping], key: str) -> float:
    return sum(float(bool(required(r, key))) for r in samples) / len(samples)


def paired_item(
    item: ItemKey, modes: Mapping[str, list[Mapping]], tool_mode: str, notool_mode: str
) -> dict:
    """The per-item record of `pair_modes` for one item that has both modes."""
    tool, notool = modes[tool_mode], modes[notool_mode]
    every = tool + notool
    return {
        "benchmark": item[0],
        "sample_id": item[1],
        "category": _first_not_none(every, "category"),
        "difficulty": _first_not_none(every, "difficulty"),
        "correct_notool": _mean(notool, "correct"),
        "correct_tool": _mean(tool, "correct"),
        "used_tool": _mean(tool, "used_tool"),
        "k_notool": len(notool),
        "k_tool": len(tool),
    }


def pair_modes(
    records: Iterable[Mapping], *, tool_mode: str = TOOL_MODE, notool_mode: str = NOTOOL_MODE
) -> list[dict]:
    """Per-item records for `adaptivity`, from sample records of both modes.

    Each result carries benchmark, sample_id, category, difficulty, ``correct_notool`` and
    ``correct_tool`` (mean correctness over the item's K samples of that mode), ``used_tool``
    (mean over its tool-mode samples), and k_tool / k_notool (sample counts). Items lacking one
    of the two modes are left out and their number is logged (see `count_unpaired`).
    """
    groups = group_by_item(records)
    paired = [
        paired_item(item, modes, tool_mode, notool_mode)
        for item, modes in groups.items()
        if tool_mode in modes and notool_mode in modes
    ]
    if unpaired := len(groups) - len(paired):
        logger.warning(
            "%d of %d items lack the %r or %r mode and are left out of the adaptivity metrics",
            unpaired,
            len(groups),
            tool_mode,
            notool_mode,
        )
    return paired


def count_unpaired(
    groups: Mapping[ItemKey, Mapping[str, list]],
    tool_mode: str = TOOL_MODE,
    notool_mode: str = NOTOOL_MODE,
) -> int:
    """Items that have records but lack the tool or the notool mode."""
    return sum(1 for modes in groups.values() if tool_mode not in modes or notool_mode not in modes)


# Per-sample (numerator, denominator) contributions; a statistic is Σ numerators / Σ denominators.
SampleRatio = Callable[[Mapping], tuple[float, float]]


def _correct(r: Mapping) -> tuple[float, float]:
    return float(bool(required(r, "correct"))), 1.0


def _score(r: Mapping) -> tuple[float, float]:
    score = r.get("score")
    return (0.0, 0.0) if score is None else (float(score), 1.0)


def _used_tool(r: Mapping) -> tuple[float, float]:
    return float(bool(r.get("used_tool"))), 1.0


def _count(key: str) -> SampleRatio:
    def ratio(r: Mapping) -> tuple[float, float]:
        value = r.get(key)
        return (0.0, 0.0) if value is None else (float(value), 1.0)

    return ratio


def _correct_if_tool(used: bool) -> SampleRatio:
    def ratio(r: Mapping) -> tuple[float, float]:
        if bool(r.get("used_tool")) != used:
            return 0.0, 0.0
        return float(bool(required(r, "correct"))), 1.0

    return ratio


def _took_tool_path(r: Mapping) -> tuple[float, float]:
    """Gated episodes only: 1 when the gate chose the tool path (beacon.agent.gate)."""
    path = r.get("gate_path")
    return (0.0, 0.0) if path is None else (float(path == TOOL_MODE), 1.0)


def _unparsed(r: Mapping) -> tuple[float, float]:
    return float(not r.get("parsed", True)), 1.0


def _errored(r: Mapping) -> tuple[float, float]:
    return float(r.get("error") is not None), 1.0


MODE_STATS: dict[str, SampleRatio] = {
    "accuracy": _correct,
    "score": _score,  # mean score in [0, 1] (ANLS etc.), over samples that have one
    "tool_rate": _used_tool,  # share of episodes with >= 1 executed tool call
    "calls_per_episode": _count("tool_calls"),  # executed calls
    "attempted_calls_per_episode": _count("attempted_tool_calls"),
    "response_tokens": _count("response_tokens"),  # mean over samples that report it
    "code_tokens": _count("code_tokens"),
    "acc_with_tool": _correct_if_tool(True),  # accuracy on episodes that executed a tool
    "acc_without_tool": _correct_if_tool(False),  # accuracy on episodes that did not
    "unparsed_rate": _unparsed,
    "error_rate": _errored,
    "wall_time_s": _count("wall_time_s"),  # mean seconds per episode (gated: the gate included)
    "gate_p_tool": _count("gate_p_tool"),  # gated mode: mean p_tool
    "gate_tool_path": _took_tool_path,  # gated mode: share of episodes sent down the tool path
}
"""Per-mode statistics, each a ratio of per-sample sums (see the module docstring)."""

RATE_STATS = frozenset(MODE_STATS) - {
    "calls_per_episode",
    "attempted_calls_per_episode",
    "response_tokens",
    "code_tokens",
    "wall_time_s",
}
"""The statistics that are fractions in [0, 1] (shown as percentages in reports)."""


@dataclass(frozen=True)
class RatioSums:
    """Per-item sums for one statistic: arrays of shape [N]; value = Σ w·num / Σ w·den."""

    numerator: np.ndarray
    denominator: np.ndarray


def mode_stat_sums(items: list[list[Mapping]]) -> dict[str, RatioSums]:
    """Per-item sums of every `MODE_STATS` entry.

    `items[i]` holds the records of item i in one mode; it may be empty (the item then adds
    nothing, which keeps the item axis shared between modes).
    """
    item_index = np.array([i for i, samples in enumerate(items) for _ in samples], dtype=int)
    flat = [record for samples in items for record in samples]
    out = {}
    for name, ratio in MODE_STATS.items():
        parts = np.array([ratio(record) for record in flat], dtype=float).reshape(-1, 2)
        numerator, denominator = (
            np.bincount(item_index, weights=parts[:, j], minlength=len(items)) for j in (0, 1)
        )
        out[name] = RatioSums(numerator, denominator)
    return out


def mode_stats(records: Iterable[Mapping]) -> dict[str, float]:
    """The `MODE_STATS` of one mode's records (NaN where undefined), plus n_items and n_samples."""
    records = list(records)
    groups = group_by_item(records)
    items = [sample for modes in groups.values() for sample in modes.values()]
    out: dict[str, float] = {}
    for name, sums in mode_stat_sums(items).items():
        total = sums.denominator.sum()
        out[name] = float(sums.numerator.sum() / total) if total > 0 else float("nan")
    out["n_items"] = len(groups)
    out["n_samples"] = len(records)
    return out
