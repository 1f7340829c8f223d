"""Adaptive tool-use metrics (beacon.md §1): MA, TE, gain / harm, Δ_TE, Text-Retain.

Every item is run in two modes with the same model: **notool** and **tool**. One record per item
carries ``correct_notool``, ``correct_tool`` and ``used_tool``, each a boolean (one sample per
mode) or a float in [0, 1]: the per-item mean over K samples of that mode (`pair_modes` builds
these from ``samples.jsonl``).

Notation, per item i: p_n(i) = mean notool correctness, p_t(i) = mean tool correctness,
u(i) = mean of ``used_tool`` over the tool-mode samples. With K = 1 these are 0/1.

K-sample aggregation (beacon.md: "use the per-item mean where a probability is needed"):

1. **Easy / hard split.** Item i is easy iff p_n(i) >= ``easy_threshold`` (default 0.5: solved in
   at least half of its notool samples; with K = 1, solved). Pass 1/K for "solved at least once"
   or 1.0 for "solved every time". MA, TE_easy and TE_hard use this split.
2. **The two modes are independent runs** (gain, harm, Text-Retain and their joint shares): the
   joint mass of "solved with tools, not without" on item i is p_t(i) · (1 - p_n(i)). This equals
   the mean over all K_t × K_n pairings of a tool sample with a notool sample of item i; pairing
   samples by their index k would pick one of those pairings arbitrarily and add variance.
3. Every item weighs the same, however many samples it has.

Deviations and things a reader will doubt:

1. Gain and harm are **conditional** (beacon.md §1, decided): gain = P[✓tool | ✗notool],
   harm = P[✗tool | ✓notool] (= 1 - Text-Retain), delta_te = gain - harm. The joint shares
   gain_share = P[✓tool ∧ ✗notool] and harm_share = P[✗tool ∧ ✓notool] are reported too; their
   difference is TE exactly (p_t(1 - p_n) - p_n(1 - p_t) = p_t - p_n item by item), which is why
   Δ_TE cannot be built from them: the paper reports TE = +1.96 but Δ_TE = +3.14 for Beacon.
2. A quantity with an empty conditioning set (no easy items, no item solved without tools) is
   NaN, not an error; MA is NaN unless both the easy and the hard set are non-empty.

All formulas take item weights ``w`` of shape [N] or [B, N] and return shape [] or [B], so the
same code gives the point estimate (w = 1) and B bootstrap resamples (w = resample counts).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

import numpy as np

ADAPTIVITY_KEYS = ("correct_notool", "correct_tool", "used_tool")

DEFAULT_EASY_THRESHOLD = 0.5
EASY_TOLERANCE = 1e-9


@dataclass(frozen=True)
class ItemOutcomes:
    """Per-item mode outcomes as arrays of shape [N], each in [0, 1].

    `easy` is 1.0 for items in D_easy (p_notool >= the easy threshold), else 0.0.
    """

    p_notool: np.ndarray
    p_tool: np.ndarray
    used_tool: np.ndarray
    easy: np.ndarray

    @property
    def hard(self) -> np.ndarray:
        """1.0 for items in D_hard (not easy), else 0.0: the complement of `easy`."""
        return 1.0 - self.easy


@dataclass(frozen=True)
class ModeAdaptiveness:
    """MA = ½ (P[no tool | easy] + P[tool | hard]) and its two halves."""

    mode_adaptiveness: np.ndarray
    p_notool_given_easy: np.ndarray
    p_tool_given_hard: np.ndarray


@dataclass(frozen=True)
class ToolEffect:
    """TE = Acc_tool - Acc_notool, overall and on the easy and hard sets."""

    te: np.ndarray
    te_easy: np.ndarray
    te_hard: np.ndarray
    acc_tool: np.ndarray
    acc_notool: np.ndarray


@dataclass(frozen=True)
class GainHarm:
    """Conditional gain / harm, their difference Δ_TE, and the joint shares (module note 1)."""

    gain: np.ndarray
    harm: np.ndarray
    delta_te: np.ndarray
    gain_share: np.ndarray
    harm_share: np.ndarray


def weighted_mean(values: np.ndarray, weights: np.ndarray, where: np.ndarray | None = None):
    """Σ_i w_i·m_i·x_i / Σ_i w_i·m_i over the item axis; NaN where the denominator is 0.

    values, where: [N]; weights: [N] or [B, N]; result: [] or [B]. `where` (mask m, default all
    ones) may also be fractional: a soft membership weight.
    """
    mask = np.ones_like(values, dtype=float) if where is None else np.asarray(where, dtype=float)
    numerator = weights @ (values * mask)
    denominator = weights @ mask
    return safe_divide(numerator, denominator)


def safe_divide(numerator, denominator):
    """numerator / denominator elementwise, NaN where the denominator is not positive."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(
            denominator > 0, numerator / np.where(denominator > 0, denominator, 1), np.nan
        )


def mode_adaptiveness(items: ItemOutcomes, weights: np.ndarray) -> ModeAdaptiveness:
    """MA = ½ · (P[no tool used | easy] + P[tool used | hard])  (beacon.md §1), in [0, 1].

    P[no tool | easy] is the mean of 1 - u(i) over easy items; P[tool | hard] the mean of u(i)
    over hard items. NaN when either set is empty.
    """
    p_notool_easy = weighted_mean(1.0 - items.used_tool, weights, items.easy)
    p_tool_hard = weighted_mean(items.used_tool, weights, items.hard)
    return ModeAdaptiveness(0.5 * (p_notool_easy + p_tool_hard), p_notool_easy, p_tool_hard)


def tool_effect(items: ItemOutcomes, weights: np.ndarray) -> ToolEffect:
    """TE = Acc_tool - Acc_notool (beacon.md §1), and the same on D_easy and D_hard, in [-1, 1]."""
    diff = items.p_tool - items.p_notool
    return ToolEffect(
        te=weighted_mean(diff, weights),
        te_easy=weighted_mean(diff, weights, items.easy),
        te_hard=weighted_mean(diff, weights, items.hard),
        acc_tool=weighted_mean(items.p_tool, weights),
        acc_notool=weighted_mean(items.p_notool, weights),
    )


def gain_harm(items: ItemOutcomes, weights: np.ndarray) -> GainHarm:
    """Gain = P[✓tool | ✗notool], Harm = P[✗tool | ✓notool], Δ_TE = Gain - Harm (beacon.md §1).

    Gain = Σ w·p_t(1 - p_n) / Σ w·(1 - p_n) and Harm = Σ w·p_n(1 - p_t) / Σ w·p_n (NaN on an
    empty condition); the joint shares gain_share = mean of p_t(1 - p_n) and harm_share = mean of
    p_n(1 - p_t) are over all items (modes independent, module point 2).
    """
    p_t, p_n = items.p_tool, items.p_notool
    gain = weighted_mean(p_t, weights, 1.0 - p_n)
    harm = weighted_mean(1.0 - p_t, weights, p_n)
    gain_share = weighted_mean(p_t * (1.0 - p_n), weights)
    harm_share = weighted_mean(p_n * (1.0 - p_t), weights)
    return GainHarm(gain, harm, gain - harm, gain_share, harm_share)


def text_retain(items: ItemOutcomes, weights: np.ndarray) -> np.ndarray:
    """Text-Retain = P[✓tool | ✓notool] = Σ p_n·p_t / Σ p_n  (beacon.md §1); NaN if Σ p_n = 0.

    With K = 1 this is the tool-mode accuracy on the items solved without tools.
    """
    return weighted_mean(items.p_tool, weights, items.p_notool)


def adaptivity_arrays(items: ItemOutcomes, weights: np.ndarray) -> dict[str, np.ndarray]:
    """All adaptivity metrics as arrays of shape [] (weights [N]) or [B] (weights [B, N])."""
    out: dict[str, np.ndarray] = {}
    for part in (
        mode_adaptiveness(items, weights),
        tool_effect(items, weights),
        gain_harm(items, weights),
    ):
        out.update({f.name: getattr(part, f.name) for f in fields(part)})
    out["text_retain"] = text_retain(items, weights)
    out["tool_rate"] = weighted_mean(items.used_tool, weights)
    return out


def item_outcomes(
    records: Iterable[Mapping], easy_threshold: float = DEFAULT_EASY_THRESHOLD
) -> ItemOutcomes:
    """Validate per-item records and stack them into `ItemOutcomes`.

    Raises ValueError naming the item and key when a value is missing or outside [0, 1].
    """
    if not 0.0 < easy_threshold <= 1.0:
        raise ValueError(
            f"easy_threshold={easy_threshold} must be in (0, 1]: an item is easy when its mean "
            "notool correctness reaches it (0.5 = majority, 1/K = solved at least once)."
        )
    rows = [
        [_probability(record, key, i) for key in ADAPTIVITY_KEYS]
        for i, record in enumerate(records)
    ]
    table = np.asarray(rows, dtype=float).reshape(-1, len(ADAPTIVITY_KEYS))
    p_notool, p_tool, used = table.T
    # The tolerance keeps 1/3 (a mean over K = 3 samples) easy at easy_threshold=1/3.
    easy = (p_notool >= easy_threshold - EASY_TOLERANCE).astype(float)
    return ItemOutcomes(p_notool.copy(), p_tool.copy(), used.copy(), easy)


def _probability(record: Mapping, key: str, index: int) -> float:
    if key not in record:
        raise ValueError(
            f"item {index}: missing {key!r}; adaptivity needs one record per item with "
            f"{', '.join(ADAPTIVITY_KEYS)} (build them from samples.jsonl with pair_modes)."
        )
    value = record[key]
    if isinstance(value, (bool, np.bool_)):
        return float(value)
    if isinstance(value, (int, float, np.number)) and 0.0 <= float(value) <= 1.0:
        return float(value)
    raise ValueError(
        f"item {index}: {key}={value!r} is neither a boolean nor a probability in [0, 1]; "
        "with K samples per mode pass the per-item mean."
    )


def adaptivity(
    records: Iterable[Mapping], *, easy_threshold: float = DEFAULT_EASY_THRESHOLD
) -> dict[str, float]:
    """Mode adaptiveness, tool effect, gain / harm, Δ_TE and Text-Retain over items.

    `records`: one mapping per item with ``correct_notool``, ``correct_tool``, ``used_tool``
    (booleans, or per-item means over K samples in [0, 1]). Returns fractions in [0, 1]
    (differences in [-1, 1]): mode_adaptiveness, p_notool_given_easy, p_tool_given_hard, te,
    te_easy, te_hard, acc_tool, acc_notool, gain, harm, delta_te, gain_share, harm_share,
    text_retain, tool_rate; NaN where undefined (see the module docstring); and
    the counts n_items, n_easy, n_hard.
    """
    items = item_outcomes(records, easy_threshold)
    n_items = len(items.p_notool)
    values = adaptivity_arrays(items, np.ones(n_items))
    out: dict[str, float] = {name: float(value) for name, value in values.items()}
    out["n_items"] = n_items
    out["n_easy"] = int(items.easy.sum())
    out["n_hard"] = n_items - out["n_easy"]
    return out
