"""Percentile bootstrap over items, vectorized as resample-count weights.

A resample of N items drawn with replacement is the same as a weight vector w with w_i = how
often item i was drawn (Σ w = N). Every metric in `beacon.metrics` is a ratio of weighted sums
over items, so B resamples are one [B, N] @ [N] matrix product per sum instead of B Python
loops. Resamples are generated in chunks so memory stays at ``chunk × N`` floats.

The interval is the plain percentile interval (2.5th and 97.5th percentile of the B resampled
values for 95 %). Resamples where a metric is undefined (e.g. no easy item drawn) are ignored
for that metric; if all are, its interval is (NaN, NaN).

Two crossed factors (`two_level_weights`): when several runs (training seeds) are evaluated on the
same items, a resample draws the items once, for every run, and the runs as a second level; the
(run, item) pair then weighs (times its run was drawn) x (times its item was drawn). Drawing the
items again within each run would treat the runs' shared items as independent samples and
average the item effect away (too narrow an interval). The crossed scheme errs the other way,
and only by a little: in the variance of a mean over S runs and N items it counts the run x item
interaction (1 - 1/N) + (1 - 1/S) + (1 - 1/S)(1 - 1/N) times instead of once, 2.3 times with
S = 3 (Owen 2007, "The pigeonhole bootstrap", Ann. Appl. Stat. 1(2)), so it is wider than needed
where the runs disagree item by item.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping

import numpy as np

DEFAULT_CHUNK = 200


def section_rng(seed: int, name: str) -> np.random.Generator:
    """A generator for one report section, stable across runs and Python processes.

    Mixing the section name into the seed keeps two sections of equal size from drawing the
    same resample indices (which would correlate their intervals).
    """
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def resample_weights(n_items: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Counts w[b, i] = times item i is drawn in resample b; shape [B, N], float, rows sum to N."""
    draws = rng.integers(0, n_items, size=(n_resamples, n_items))
    offsets = np.arange(n_resamples)[:, None] * n_items
    counts = np.bincount((draws + offsets).ravel(), minlength=n_resamples * n_items)
    return counts.reshape(n_resamples, n_items).astype(float)


def two_level_weights(seed_counts: np.ndarray, item_counts: np.ndarray) -> np.ndarray:
    """Weights w[b, j·N + i] = s[b, j] · c[b, i] of (seed j, item i) pairs, shape [B, S·N].

    seed_counts [B, S] and item_counts [B, N] are `resample_weights` draws: seeds and items with
    replacement, the same item counts for every seed (module docstring). Rows are seed-major, so
    they line up with values stacked seed by seed; each row sums to S·N.
    """
    n_resamples = seed_counts.shape[0]
    if item_counts.shape[0] != n_resamples:
        raise ValueError(
            f"seed_counts has {n_resamples} resamples and item_counts {item_counts.shape[0]}: "
            "draw both for the same number of resamples."
        )
    return (seed_counts[:, :, None] * item_counts[:, None, :]).reshape(n_resamples, -1)


def bootstrap_distribution(
    statistic: Callable[[np.ndarray], Mapping[str, np.ndarray]],
    n_items: int,
    n_resamples: int,
    rng: np.random.Generator,
    chunk: int = DEFAULT_CHUNK,
) -> dict[str, np.ndarray]:
    """{name: [B] resampled values} of `statistic(weights [b, N]) -> {name: [b]}`."""
    parts: dict[str, list[np.ndarray]] = {}
    for start in range(0, n_resamples, chunk):
        weights = resample_weights(n_items, min(chunk, n_resamples - start), rng)
        for name, values in statistic(weights).items():
            parts.setdefault(name, []).append(np.asarray(values, dtype=float))
    return {name: np.concatenate(chunks) for name, chunks in parts.items()}


def percentile_ci(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """(low, high) percentile interval of bootstrap `values`, ignoring NaN resamples."""
    finite = values[~np.isnan(values)]
    if finite.size == 0:
        return float("nan"), float("nan")
    tail = 50.0 * (1.0 - level)
    low, high = np.percentile(finite, [tail, 100.0 - tail])
    return float(low), float(high)
