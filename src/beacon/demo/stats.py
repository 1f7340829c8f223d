"""Metrics of one demo variant over its seeds, with a seed-and-item bootstrap.

A variant (an RL arm, say) has one held-out eval run per seed, all on the same items. Its
point estimate pools every (seed, item) pair, each weighing the same. Its 95% interval comes from
a two-level bootstrap: draw the seeds with replacement, then the items within each drawn seed,
so the interval holds both the training noise between seeds and the sampling noise of the item
set. With one seed it is the ordinary item bootstrap (`beacon.metrics`).

Besides the adaptivity metrics of `beacon.metrics.adaptivity` (whose easy/hard split is the
model's own: easy = solved without tools), the demo reports tool use by the item's *design*
difficulty (`synth_demo` metadata: `large`/`small` are easy, `tiny`/`search` hard): whether the
model crops where cropping is needed, independent of what it can read.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import numpy as np

from beacon.metrics.adaptivity import adaptivity_arrays, item_outcomes, weighted_mean
from beacon.metrics.bootstrap import percentile_ci
from beacon.metrics.records import dedupe, pair_modes
from beacon.rl import GroupOutcomes, RLConfig
from beacon.rl.scoring import score_groups

Interval = tuple[float, float, float]
"""(point, low, high); NaN where undefined."""

DESIGN_METRICS = (
    "p_tool_easy_design",
    "p_tool_hard_design",
    "acc_tool_hard_design",
    "acc_tool_easy_design",
    "acc_notool_easy_design",
)


def seed_item_weights(sizes: Sequence[int], n_resamples: int, rng: np.random.Generator):
    """[B, Σ sizes] counts: seeds drawn with replacement, then items within each drawn seed."""
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    weights = np.zeros((n_resamples, int(offsets[-1])))
    for b in range(n_resamples):
        for seed in rng.integers(0, len(sizes), size=len(sizes)):
            n = sizes[seed]
            counts = np.bincount(rng.integers(0, n, size=n), minlength=n)
            weights[b, offsets[seed] : offsets[seed + 1]] += counts
    return weights


def variant_metrics(
    runs: Sequence[Sequence[Mapping]], n_resamples: int, seed: int = 0
) -> dict[str, Interval]:
    """{metric: (point, low, high)} over the sample records of each seed's eval run."""
    paired = [pair_modes(dedupe(records)) for records in runs]
    items = item_outcomes([item for run in paired for item in run])
    hard = np.array([item["difficulty"] == "hard" for run in paired for item in run], float)

    def statistic(weights: np.ndarray) -> dict[str, np.ndarray]:
        out = adaptivity_arrays(items, weights)
        out["p_tool_easy_design"] = weighted_mean(items.used_tool, weights, 1.0 - hard)
        out["p_tool_hard_design"] = weighted_mean(items.used_tool, weights, hard)
        out["acc_tool_hard_design"] = weighted_mean(items.p_tool, weights, hard)
        out["acc_tool_easy_design"] = weighted_mean(items.p_tool, weights, 1.0 - hard)
        out["acc_notool_easy_design"] = weighted_mean(items.p_notool, weights, 1.0 - hard)
        return out

    point = statistic(np.ones(len(hard)))
    result = {name: (float(value), float("nan"), float("nan")) for name, value in point.items()}
    if n_resamples > 0 and len(hard):
        rng = np.random.default_rng(seed)
        draws = statistic(seed_item_weights([len(run) for run in paired], n_resamples, rng))
        for name, values in draws.items():
            result[name] = (result[name][0], *percentile_ci(np.asarray(values, float)))
    return result


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
