"""Metrics of the demo's variants over seeds, and paired differences between variants.

A variant (an RL arm, an OPD variant) has one held-out eval run per training seed, all on the
same items. Its point estimate pools every (seed, item) pair, each weighing the same.

**The bootstrap draws the items once and the seeds as a second level.** One resample is one
replay of the experiment: the items are drawn with replacement once, and that item multiset is
used for every seed and every variant; each variant's seeds are drawn with replacement; the pair
(seed j, item i) then weighs (times j was drawn) x (times i was drawn)
(`beacon.metrics.bootstrap.two_level_weights`). Every metric is a ratio of weighted sums over
those pairs (beacon.md §1, `beacon.metrics.adaptivity`), so its value under the weights is its
value on the replayed experiment. The items are drawn once because the seeds share them: an item
one seed fails, the others tend to fail too, and drawing items per seed would average that
shared item effect away. In the simulation of `tests/demo/test_demo_stats.py` (400 experiments,
3 seeds, 120 items mostly solved by every seed or by none) the nominal 95% interval holds the
true value in 96.5% of experiments; drawing items per seed, in 81.5%. With one seed it is the
ordinary item bootstrap.

**Comparisons are paired differences.** `paired_differences(runs_a, runs_b)` is metric(A) −
metric(B) under the same resamples: the same item multiset for both variants, each variant's own
seeds drawn within it. Items hard for both cancel in the difference, so its interval is the one
to read, not whether two marginal intervals overlap. An interval that excludes 0 is evidence of a
difference in its direction; one that contains 0 is no evidence either way, which is not
evidence that the two are equal. Each variant's seeds are drawn by a generator keyed by the
bootstrap seed and a digest of the variant's outcomes, so a variant draws the same seeds in its
own row of a table and in every comparison, in either argument: a variant against itself gives
exactly 0 with a zero-width interval, and swapping the arguments negates the difference.

Public API, for report sections (`beacon.demo.report` renders them):

- `variant_metrics(runs, n_resamples, seed) -> {metric: Interval}`: one variant's table row.
- `paired_differences(runs_a, runs_b, n_resamples, seed) -> {metric: Interval}` and
  `paired_difference(runs_a, runs_b, metric, n_resamples, seed) -> Interval`: A − B.
- `Interval(point, low, high)`, with `excludes_zero`.
- `SAME_NUMBER`: reported metrics that are one number (harm = 1 − Text-Retain); report one.
- `beacon.demo.report.comparison_line(metric, label_a, label_b, difference, direction)`:
  "Δ MA +NAAR − accuracy-only = +0.27 [+0.19, +0.35]: reproduced".

`runs` is one list of `samples.jsonl` records per seed. Besides the adaptivity metrics (whose
easy/hard split is the model's own: easy = solved without tools), the demo reports tool use by
the item's *design* difficulty (`synth_demo` metadata: `large`/`small` are easy, `tiny`/`search`
hard): whether the model crops where cropping is needed, independent of what it can read.

What is not covered:

1. Width. The crossed draws count the seed x item interaction (items some seeds solve and others
   do not) about 2.3 times with 3 seeds (`beacon.metrics.bootstrap`, Owen 2007): the interval
   errs wide: 96.5% in the simulation, and wider still where seeds disagree on many items and
   share little item effect.
   The seed level, on the other hand, can only redraw the seeds there are: with 3 its spread is
   2/3 of the seeds' variance ((S − 1)/S), so where whole-seed shifts dominate the interval can
   be too narrow. A variant with one run holds no training noise: its interval is the items'.
2. Seeds are not paired across variants: seed 0 of NAAR and seed 0 of accuracy-only are
   different runs that share nothing past their start, so each variant's seeds are drawn alone.
3. Each interval is 95% on its own. Of ten findings with no real difference behind them, one
   or more would exclude 0 about 40% of the time if they were independent (1 − 0.95^10): read
   a lone "reproduced" with that.
4. Memory: B x S x N floats per variant in one piece (1000 x 3 x 120: 2.9 MB).
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from beacon.metrics.adaptivity import ItemOutcomes, adaptivity_arrays, item_outcomes, weighted_mean
from beacon.metrics.bootstrap import (
    percentile_ci,
    resample_weights,
    section_rng,
    two_level_weights,
)
from beacon.metrics.records import dedupe, pair_modes
from beacon.train.core.outcomes import GroupOutcomes
from beacon.train.grpo.config import RLConfig
from beacon.train.grpo.group_scoring import score_groups

ItemKey = tuple[str, str]
"""(benchmark, sample_id) of a held-out item."""


class Interval(NamedTuple):
    """A point estimate with its 95% bootstrap interval; NaN where undefined."""

    point: float
    low: float
    high: float

    @property
    def excludes_zero(self) -> bool:
        """True when the whole interval lies on one side of 0 (False if it is undefined)."""
        return self.low > 0 or self.high < 0


DESIGN_METRICS = (
    "p_tool_easy_design",
    "p_tool_hard_design",
    "acc_tool_hard_design",
    "acc_tool_easy_design",
    "acc_notool_easy_design",
)

SAME_NUMBER = {"harm": "text_retain"}
"""Reported metrics that are one number: harm = P[✗tool | ✓notool] = 1 − Text-Retain exactly
(beacon.md §1), in every resample too. A comparison reports the second and names the first."""

ABSENT = {"correct_notool": 0.0, "correct_tool": 0.0, "used_tool": 0.0, "difficulty": None}
"""Placeholder of an item a seed's run lacks; it weighs 0 (`SeedRuns.present`)."""


@dataclass(frozen=True)
class SeedRuns:
    """One variant's held-out outcomes, one row per (seed, item), seed-major: row j·N + i is
    seed j's outcome on the i-th of the shared item keys. Arrays have shape [S·N]."""

    items: ItemOutcomes
    hard_design: np.ndarray
    """1.0 for items hard by design (`tiny`, `search`), else 0.0."""
    present: np.ndarray
    """1.0 where seed j's run has item i in both modes, else 0.0 (the row then weighs 0)."""
    n_seeds: int

    def digest(self) -> int:
        """A checksum of the outcomes: the key of this variant's seed draws (module docstring)."""
        arrays = (
            self.items.p_notool,
            self.items.p_tool,
            self.items.used_tool,
            self.hard_design,
            self.present,
        )
        return zlib.crc32(b"".join(np.ascontiguousarray(a, float).tobytes() for a in arrays))


def paired_items(runs: Sequence[Sequence[Mapping]]) -> list[dict[ItemKey, dict]]:
    """Per seed, {item key: `pair_modes` record} of its sample records."""
    return [
        {(item["benchmark"], item["sample_id"]): item for item in pair_modes(dedupe(records))}
        for records in runs
    ]


def seed_runs(paired: Sequence[Mapping[ItemKey, dict]], keys: Sequence[ItemKey]) -> SeedRuns:
    """The outcome table of one variant over `keys` (items a seed lacks weigh 0)."""
    rows = [seed.get(key, ABSENT) for seed in paired for key in keys]
    return SeedRuns(
        items=item_outcomes(rows),
        hard_design=np.array([row["difficulty"] == "hard" for row in rows], float),
        present=np.array([row is not ABSENT for row in rows], float),
        n_seeds=len(paired),
    )


def outcome_metrics(runs: SeedRuns, weights: np.ndarray) -> dict[str, np.ndarray]:
    """Every reported metric of `runs` under (seed, item) weights [S·N] or [B, S·N]."""
    weights = weights * runs.present
    items, hard = runs.items, runs.hard_design
    out = adaptivity_arrays(items, weights)
    out["p_tool_easy_design"] = weighted_mean(items.used_tool, weights, 1.0 - hard)
    out["p_tool_hard_design"] = weighted_mean(items.used_tool, weights, hard)
    out["acc_tool_hard_design"] = weighted_mean(items.p_tool, weights, hard)
    out["acc_tool_easy_design"] = weighted_mean(items.p_tool, weights, 1.0 - hard)
    out["acc_notool_easy_design"] = weighted_mean(items.p_notool, weights, 1.0 - hard)
    return out


def resampled_metrics(
    variants: Sequence[SeedRuns], n_items: int, n_resamples: int, seed: int
) -> list[dict[str, np.ndarray]]:
    """Per variant, {metric: [B] values} under shared item draws and its own seed draws.

    The items are drawn once for all variants (`section_rng(seed, "items")`); a variant's seeds
    by a generator keyed by `seed` and its `digest`, so its draws do not depend on which
    variants it is resampled with, or in which order.
    """
    item_counts = resample_weights(n_items, n_resamples, section_rng(seed, "items"))
    out = []
    for runs in variants:
        rng = np.random.default_rng([seed, runs.digest()])
        seed_counts = resample_weights(runs.n_seeds, n_resamples, rng)
        out.append(outcome_metrics(runs, two_level_weights(seed_counts, item_counts)))
    return out


def intervals(
    points: Mapping[str, np.ndarray], draws: Mapping[str, np.ndarray] | None
) -> dict[str, Interval]:
    """{metric: Interval}: the point, and the percentile interval of the draws (NaN if none)."""
    nan = float("nan")
    return {
        name: Interval(float(value), *(percentile_ci(draws[name]) if draws else (nan, nan)))
        for name, value in points.items()
    }


def variant_metrics(
    runs: Sequence[Sequence[Mapping]], n_resamples: int, seed: int = 0
) -> dict[str, Interval]:
    """{metric: (point, low, high)} of one variant from the sample records of each seed's run."""
    paired = paired_items(runs)
    keys = sorted({key for seed_items in paired for key in seed_items})
    table = seed_runs(paired, keys)
    points = outcome_metrics(table, np.ones(len(table.present)))
    if n_resamples == 0 or not keys:
        return intervals(points, None)
    return intervals(points, resampled_metrics([table], len(keys), n_resamples, seed)[0])


def paired_differences(
    runs_a: Sequence[Sequence[Mapping]],
    runs_b: Sequence[Sequence[Mapping]],
    n_resamples: int,
    seed: int = 0,
) -> dict[str, Interval]:
    """{metric: metric(A) − metric(B)} with the 95% interval of the difference under shared
    resamples: one item multiset for both variants, each variant's seeds drawn within it.

    `runs_a`, `runs_b`: one list of sample records per seed of variant A / B, evaluated on the
    same items (an item only one variant has counts in that variant's metric alone).
    """
    paired_a, paired_b = paired_items(runs_a), paired_items(runs_b)
    keys = sorted({key for seed_items in (*paired_a, *paired_b) for key in seed_items})
    a, b = seed_runs(paired_a, keys), seed_runs(paired_b, keys)
    point_a = outcome_metrics(a, np.ones(len(a.present)))
    point_b = outcome_metrics(b, np.ones(len(b.present)))
    points = {name: point_a[name] - point_b[name] for name in point_a}
    if n_resamples == 0 or not keys:
        return intervals(points, None)
    draws_a, draws_b = resampled_metrics([a, b], len(keys), n_resamples, seed)
    return intervals(points, {name: draws_a[name] - draws_b[name] for name in draws_a})


def paired_difference(
    runs_a: Sequence[Sequence[Mapping]],
    runs_b: Sequence[Sequence[Mapping]],
    metric: str,
    n_resamples: int,
    seed: int = 0,
) -> Interval:
    """metric(A) − metric(B) with its paired 95% interval (`paired_differences`)."""
    differences = paired_differences(runs_a, runs_b, n_resamples, seed)
    if metric not in differences:
        raise ValueError(
            f"unknown metric {metric!r}; the demo reports {', '.join(sorted(differences))}."
        )
    return differences[metric]


def direct_answer_push(
    reward: str,
    reading: float,
    direct_share: float,
    crop_accuracy: float,
    group_size: int = 8,
    groups: int = 3000,
    seed: int = 0,
) -> float:
    """Summed GRPO advantage of the direct (tool-free) answers per group of an easy item.

    Rollouts answer directly with probability `direct_share` (right with probability `reading`)
    and crop otherwise (right with probability `crop_accuracy`); the groups are scored by the
    trainer's own `score_groups` under `reward`. Positive: a step makes direct answers likelier
    on such items; negative: it pushes toward the tool. This is NAAR's premise in one number.
    """
    rng = random.Random(seed)
    outcomes, direct_flags = [], []
    for _ in range(groups):
        direct = [rng.random() < direct_share for _ in range(group_size)]
        correct = tuple(rng.random() < (reading if d else crop_accuracy) for d in direct)
        outcomes.append(GroupOutcomes(correct, tuple(not d for d in direct), (True,) * group_size))
        direct_flags += direct
    advantages = score_groups(outcomes, RLConfig(reward=reward)).advantages.tolist()
    return sum(a for a, d in zip(advantages, direct_flags, strict=True) if d) / groups
