"""`summarize`: every metric of a run, per benchmark, per category, overall, with bootstrap CIs.

Sections and what they pool:

- ``overall``: all items of all benchmarks pooled, so each item weighs the same and a benchmark
  weighs by its item count (sample-weighted, beacon.md §1) — not the mean of benchmark scores.
- ``benchmarks[b]``: the items of benchmark b; ``categories`` and ``difficulties`` inside it split
  them by the item's ``category`` / ``difficulty`` (items where it is null are in no split).

Each section holds ``modes`` (the `MODE_STATS` of every mode present), ``adaptivity`` (the
`adaptivity` metrics over items that have both the tool and the notool mode; a ``gated`` mode
takes no part in them), ``gate_paths`` (gated runs: episodes per path the gate took) and, when
``bootstrap > 0``, ``ci``: percentile intervals from resampling the section's items (all samples
and modes of an item move together). Undefined values are ``None``, so the result is valid JSON
as it is (``json.dumps(summary, allow_nan=False)`` works).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np

from beacon.metrics.adaptivity import (
    DEFAULT_EASY_THRESHOLD,
    ItemOutcomes,
    adaptivity_arrays,
    item_outcomes,
    safe_divide,
)
from beacon.metrics.bootstrap import bootstrap_distribution, percentile_ci, section_rng
from beacon.metrics.records import (
    NOTOOL_MODE,
    TOOL_MODE,
    ItemKey,
    RatioSums,
    count_unpaired,
    dedupe,
    group_by_item,
    mode_stat_sums,
    paired_item,
)


class Section(TypedDict, total=False):
    """One section of a summary (overall, a benchmark, a category or difficulty split)."""

    n_items: int
    n_samples: int
    n_paired: int  # items with both the tool and the notool mode
    n_unpaired: int
    n_easy: int
    n_hard: int
    modes: dict[str, dict[str, float | None]]  # mode -> MODE_STATS
    adaptivity: dict[str, float | None]  # ADAPTIVITY_METRICS
    ci: dict[str, Any]  # same layout as modes / adaptivity, [low, high] pairs (bootstrap > 0)
    categories: dict[str, Section]  # benchmark sections only
    difficulties: dict[str, Section]  # benchmark sections only
    aggregates: dict[str, dict[str, float]]  # benchmark-specific metrics per mode
    gate_paths: dict[str, int]  # gated mode: episodes per path taken ("tool", "notool")


class Summary(TypedDict):
    """What `summarize` returns and summary.json holds (see the module docstring)."""

    method: dict[str, Any]
    overall: Section
    benchmarks: dict[str, Section]


Aggregator = Callable[[list[Mapping]], Mapping[str, float]]
"""A benchmark-specific metric over the records of one mode (e.g. HallusionBench qAcc)."""

MODE_ORDER = (NOTOOL_MODE, TOOL_MODE, "gated", "hinted")
ADAPTIVITY_METRICS = (
    "mode_adaptiveness",
    "p_notool_given_easy",
    "p_tool_given_hard",
    "te",
    "te_easy",
    "te_hard",
    "acc_tool",
    "acc_notool",
    "gain",
    "harm",
    "delta_te",
    "gain_share",
    "harm_share",
    "text_retain",
    "tool_rate",
)


def jsonable(value):
    """`value` with numpy scalars made Python numbers and NaN / inf made None, recursively."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def _ordered_modes(modes: Iterable[str]) -> list[str]:
    present = set(modes)
    return [m for m in MODE_ORDER if m in present] + sorted(present - set(MODE_ORDER))


@dataclass(frozen=True)
class SectionArrays:
    """One section's per-item sums on a shared item axis [N], ready for weights [N] or [B, N].

    `paired_index` selects the items that have both the tool and the notool mode; `outcomes`
    holds those items' `ItemOutcomes`, in that order.
    """

    n_items: int
    modes: list[str]
    sums: dict[str, dict[str, RatioSums]]
    paired_index: np.ndarray
    outcomes: ItemOutcomes

    @classmethod
    def build(cls, groups: Mapping[ItemKey, Mapping[str, list]], easy_threshold: float):
        keys = list(groups)
        modes = _ordered_modes(m for item_modes in groups.values() for m in item_modes)
        sums = {mode: mode_stat_sums([groups[key].get(mode, []) for key in keys]) for mode in modes}
        both = {TOOL_MODE, NOTOOL_MODE}
        paired = [i for i, key in enumerate(keys) if both <= groups[key].keys()]
        items = [paired_item(keys[i], groups[keys[i]], TOOL_MODE, NOTOOL_MODE) for i in paired]
        outcomes = item_outcomes(items, easy_threshold)
        return cls(len(keys), modes, sums, np.array(paired, dtype=int), outcomes)

    def statistic(self, weights: np.ndarray) -> dict[tuple[str, str], np.ndarray]:
        """{(mode, stat) or ("adaptivity", metric): value} under item weights [N] or [B, N]."""
        out = {
            (mode, name): safe_divide(weights @ s.numerator, weights @ s.denominator)
            for mode, mode_sums in self.sums.items()
            for name, s in mode_sums.items()
        }
        if len(self.paired_index):
            paired = adaptivity_arrays(self.outcomes, weights[..., self.paired_index])
            out.update({("adaptivity", name): value for name, value in paired.items()})
        return out


def section_metrics(
    records: list[Mapping],
    *,
    bootstrap: int,
    rng: np.random.Generator,
    easy_threshold: float = DEFAULT_EASY_THRESHOLD,
    level: float = 0.95,
) -> dict:
    """Counts, per-mode stats, adaptivity and (bootstrap > 0) their CIs for one set of records."""
    groups = group_by_item(records)
    arrays = SectionArrays.build(groups, easy_threshold)
    point = arrays.statistic(np.ones(arrays.n_items))
    n_easy = int(arrays.outcomes.easy.sum())
    section: dict = {
        "n_items": arrays.n_items,
        "n_samples": len(records),
        "n_paired": len(arrays.paired_index),
        "n_unpaired": count_unpaired(groups),
        "n_easy": n_easy,
        "n_hard": len(arrays.paired_index) - n_easy,
        "modes": {m: {n: point[m, n] for n in arrays.sums[m]} for m in arrays.modes},
        "adaptivity": {n: point.get(("adaptivity", n), math.nan) for n in ADAPTIVITY_METRICS},
    }
    paths = [r["gate_path"] for r in records if r.get("gate_path") is not None]
    if paths:
        section["gate_paths"] = {path: paths.count(path) for path in (TOOL_MODE, NOTOOL_MODE)}
    if bootstrap > 0 and arrays.n_items:
        dist = bootstrap_distribution(arrays.statistic, arrays.n_items, bootstrap, rng)
        cis = {key: percentile_ci(values, level) for key, values in dist.items()}
        nan_ci = (math.nan, math.nan)
        section["ci"] = {
            "modes": {m: {n: cis[m, n] for n in arrays.sums[m]} for m in arrays.modes},
            "adaptivity": {n: cis.get(("adaptivity", n), nan_ci) for n in ADAPTIVITY_METRICS},
        }
    return section


def _split(records: Iterable[Mapping], key: str) -> dict[str, list[Mapping]]:
    """Records grouped by record[key] (first-seen order), records where it is null left out."""
    out: dict[str, list[Mapping]] = {}
    for record in records:
        if record.get(key) is not None:
            out.setdefault(str(record[key]), []).append(record)
    return out


def summarize(
    records: Iterable[Mapping],
    *,
    bootstrap: int = 1000,
    seed: int = 0,
    aggregators: Mapping[str, Aggregator] | None = None,
    easy_threshold: float = DEFAULT_EASY_THRESHOLD,
    level: float = 0.95,
) -> Summary:
    """Every metric of a run's ``samples.jsonl`` records, per benchmark / category / overall.

    `bootstrap`: resamples for the percentile CIs (0 = no CIs); `seed` makes them reproducible.
    `aggregators`: ``{benchmark: fn(records of one mode) -> {name: value}}``, whose results land
    in ``benchmarks[b]["aggregates"][mode]``. Duplicate records (same benchmark, sample_id, mode,
    k) are dropped. See the module docstring for the layout; the result is JSON-ready.
    """
    if bootstrap < 0:
        raise ValueError(f"bootstrap={bootstrap} must be >= 0 (0 turns confidence intervals off).")
    records = dedupe(records)
    options = {"bootstrap": bootstrap, "easy_threshold": easy_threshold, "level": level}
    summary: dict = {
        "method": {
            **options,
            "seed": seed,
            "ci": "percentile bootstrap over items",
            "overall": "pooled over all items of all benchmarks (sample-weighted)",
        },
        "overall": section_metrics(records, rng=section_rng(seed, "overall"), **options),
        "benchmarks": {},
    }
    for bench, bench_records in _split(records, "benchmark").items():
        section = section_metrics(bench_records, rng=section_rng(seed, bench), **options)
        for split_key, name in (("category", "categories"), ("difficulty", "difficulties")):
            section[name] = {
                value: section_metrics(part, rng=section_rng(seed, f"{bench}/{value}"), **options)
                for value, part in _split(bench_records, split_key).items()
            }
        if aggregators and bench in aggregators:
            by_mode = _split(bench_records, "mode")
            section["aggregates"] = {
                mode: dict(aggregators[bench](by_mode[mode])) for mode in _ordered_modes(by_mode)
            }
        summary["benchmarks"][bench] = section
    return jsonable(summary)  # type: ignore[return-value]  # the same layout, JSON-ready
