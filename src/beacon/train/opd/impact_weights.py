"""Per-position loss weights: ReVuE's grouped weights (Eq. 9, 11) and the paper's interventions.

Notation (Section 4.3): T = the trajectory's supervised positions, s_t the token impact (Eq. 7),
alpha the High fraction, lambda (`lam`) the High group's total weight. Positions are ranked by s_t,
descending, ties broken by the earlier position; High = the first ceil(alpha|T|), Low = the rest.
The trajectory loss is (w * kl).mean() with

    w_t = lam |T| / |High|        for t in High
    w_t = (1 - lam) |T| / |Low|   for t in Low                                        (Eq. 9)

so each group carries its total weight spread evenly and the mean weight is 1. Fallback to w = 1
(uniform mean, b_i = 0 in Eq. 11) when impacts are unavailable, |T| < 2 or a group would be empty.
One reading of ours: impacts that are all zero (the reflection moved nothing) or not finite count
as unavailable, since ranking them would put an arbitrary prefix into High.

Interventions (Appendix C.2, Table 10) are further rows of one table, `WEIGHTING_TABLE`: each is
a selector (which positions are High, which are masked) and a combiner (Eq. 9's two groups, or the
kept positions sharing Low's total), picked by name through `WEIGHTINGS`. Masked positions get
weight 0 and every kept group keeps its total weight (so their mean weight is below 1, as the
paper's "total group loss weight 0.5" says).
ceil(alpha|T|) is computed on alpha|T| rounded to 9 decimals, so 0.1 x 30 gives 3, not 4.

Impact: Token impact (Eq. 7) and the adopted teacher target (Eq. 10).

The reflection-conditioned teacher q^R is adopted (u_i = 1) only when reflection exists, its
scoring succeeded and the completion re-encoded to the student's exact token ids (Appendix A.3);
otherwise the base teacher q^0 is the target and no impact exists for the trajectory. An impact
that cannot be computed (wrong length, non-finite values) keeps q^R as the target and only turns
grouping off (b_i = 0 in Eq. 11).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor

from beacon.train.opd.topk import TeacherScores


@dataclass
class Weights:
    """Weights w [T] for one trajectory and why grouping fell back (None when it applied)."""

    weights: Tensor
    fallback: str | None = None


WeightFn = Callable[[Tensor | None, int, float, float, torch.Generator | None], Weights]


def high_count(num_positions: int, alpha: float) -> int:
    """|High| = ceil(alpha |T|), robust to float error in alpha |T|."""
    return math.ceil(round(alpha * num_positions, 9))


def impact_order(impact: Tensor) -> Tensor:
    """Positions by impact, descending; equal impacts keep the earlier position first."""
    return torch.sort(impact, descending=True, stable=True).indices


def _check(alpha: float, lam: float) -> None:
    if not 0 < alpha <= 1:
        raise ValueError(f"revue.alpha={alpha} must be in (0, 1] (the paper uses 0.2).")
    if not 0 < lam < 1:
        raise ValueError(f"revue.lam={lam} must be in (0, 1) (the paper uses 0.5).")


def _impact_problem(impact: Tensor | None, num_positions: int) -> str | None:
    if num_positions < 2:
        return "too_short"
    if impact is None:
        return "no_impact"
    if impact.shape != (num_positions,):
        return "no_impact"
    if not bool(torch.isfinite(impact).all()):
        return "nonfinite_impact"
    if not bool((impact != 0).any()):
        return "zero_impact"
    return None


def _uniform(num_positions: int, reason: str | None, like: Tensor | None) -> Weights:
    dtype = like.dtype if like is not None and like.is_floating_point() else torch.float32
    device = like.device if like is not None else None
    return Weights(torch.ones(num_positions, dtype=dtype, device=device), reason)


@dataclass(frozen=True)
class Selection:
    """The positions a weighting singles out: `high` takes High's total weight lam, `drop` is
    masked to 0; every other position is Low."""

    high: Tensor
    drop: Tensor


_NONE = torch.empty(0, dtype=torch.long)

Selector = Callable[[Tensor, int, int], Selection]
"""(ranking or random permutation of the positions, n = ceil(alpha|T|), |T|) -> Selection."""
Combiner = Callable[[Selection, int, float, Tensor | None], Weights]
"""(selection, |T|, lam, a tensor whose dtype and device the weights take) -> Weights."""


def _top_high(order: Tensor, n: int, num_positions: int) -> Selection:
    return Selection(high=order[:n], drop=_NONE)


def _top_dropped(order: Tensor, n: int, num_positions: int) -> Selection:
    return Selection(high=_NONE, drop=order[:n])


def _top_high_bottom_dropped(order: Tensor, n: int, num_positions: int) -> Selection:
    """High as ReVuE's; the last n of the ranking masked, never a High one (alpha > 0.5)."""
    return Selection(high=order[:n], drop=order[max(n, num_positions - n) :])


def eq9_groups(chosen: Selection, num_positions: int, lam: float, like: Tensor | None) -> Weights:
    """Eq. 9: High shares lam |T|, Low (neither high nor dropped) shares (1 - lam) |T|."""
    in_high = torch.zeros(num_positions, dtype=torch.bool)
    in_high[chosen.high] = True
    in_low = ~in_high
    in_low[chosen.drop] = False
    n_high, n_low = int(in_high.sum()), int(in_low.sum())
    if n_high == 0 or n_low == 0:
        return _uniform(num_positions, "empty_group", like)
    weights = _uniform(num_positions, None, like).weights.zero_()
    weights[in_high.to(weights.device)] = lam * num_positions / n_high
    weights[in_low.to(weights.device)] = (1 - lam) * num_positions / n_low
    return Weights(weights)


def kept_share(chosen: Selection, num_positions: int, lam: float, like: Tensor | None) -> Weights:
    """Masking without a High group: the kept positions share Low's total (1 - lam) |T|."""
    keep = torch.ones(num_positions, dtype=torch.bool)
    keep[chosen.drop] = False
    if not bool(keep.any()):
        return _uniform(num_positions, "empty_group", like)
    weights = _uniform(num_positions, None, like).weights
    weights[~keep.to(weights.device)] = 0.0
    weights[keep.to(weights.device)] = (1 - lam) * num_positions / int(keep.sum())
    return Weights(weights)


@dataclass(frozen=True)
class Weighting:
    """One row of the weighting table: how positions are selected, and how weights follow.

    `ranked` selectors read the impact ranking (and fall back to uniform when impacts are
    unavailable); the others select from a random permutation (Table 10's random controls).
    `select` None is the plain mean (vanilla OPD)."""

    select: Selector | None
    combine: Combiner
    ranked: bool = True


WEIGHTING_TABLE: dict[str, Weighting] = {
    "revue": Weighting(_top_high, eq9_groups),  # Eq. 9
    "uniform": Weighting(None, eq9_groups),  # vanilla OPD, reflection without reweighting
    "random_select": Weighting(_top_high, eq9_groups, ranked=False),  # random High
    "mask_random": Weighting(_top_dropped, kept_share, ranked=False),  # random ceil(a|T|) at 0
    "mask_top": Weighting(_top_dropped, kept_share),  # High at 0, Low keeps its weight
    "mask_low": Weighting(_top_high_bottom_dropped, eq9_groups),  # lowest at 0, High keeps lam
}
"""ReVuE's weights and the paper's interventions (Appendix C.2, Table 10), by config name."""


def apply_weighting(
    weighting: Weighting,
    impact: Tensor | None,
    num_positions: int,
    alpha: float = 0.2,
    lam: float = 0.5,
    generator: torch.Generator | None = None,
) -> Weights:
    """Weights of one trajectory under `weighting`, with the uniform fallback of Eq. 11."""
    if weighting.select is None:
        return _uniform(num_positions, None, impact)
    _check(alpha, lam)
    if weighting.ranked:
        problem = _impact_problem(impact, num_positions)
        if problem is not None:
            return _uniform(num_positions, problem, impact)
        order = impact_order(impact.cpu())
    elif num_positions < 2:
        return _uniform(num_positions, "too_short", impact)
    else:
        order = torch.randperm(num_positions, generator=generator)
    n = high_count(num_positions, alpha)
    return weighting.combine(weighting.select(order, n, num_positions), num_positions, lam, impact)


def revue_weights(
    impact: Tensor | None,
    num_positions: int,
    alpha: float = 0.2,
    lam: float = 0.5,
    generator: torch.Generator | None = None,
) -> Weights:
    """ReVuE's grouped weights (Eq. 9), with the uniform fallback of Eq. 11 (b_i = 0)."""
    return apply_weighting(WEIGHTING_TABLE["revue"], impact, num_positions, alpha, lam, generator)


def grouped_weights(
    impact: Tensor | None, alpha: float = 0.2, lam: float = 0.5, num_positions: int | None = None
) -> Tensor:
    """Per-position weights w of Eq. 9 for one trajectory's supervised positions.

    `impact` [T] holds s_t (Eq. 7) or is None when impacts are unavailable (then give
    `num_positions`). All ones when the fallback applies, so the trajectory loss is always
    `(w * per_position_kl).mean()`.
    """
    if num_positions is None:
        if impact is None:
            raise ValueError("grouped_weights needs num_positions when impact is None.")
        num_positions = int(impact.shape[0])
    return revue_weights(impact, num_positions, alpha, lam).weights


WEIGHTINGS: dict[str, WeightFn] = {
    name: partial(apply_weighting, weighting) for name, weighting in WEIGHTING_TABLE.items()
}
"""Weight functions by config name (`revue.weighting`), each `(impact, |T|, alpha, lam,
generator) -> Weights`."""


def token_impact(logp_reflect: Tensor, logp_base: Tensor, mask: Tensor | None = None) -> Tensor:
    """Per-token impact s_t = |log q^R(y_t) - log q^0(y_t)|  (ReVuE, Eq. 7).

    Both inputs are full-vocabulary log-probs of the sampled token, shape [T] (or [B, T]); the
    result is detached, zero where `mask` is False.
    """
    impact = (logp_reflect.detach() - logp_base.detach()).abs()
    if mask is not None:
        impact = torch.where(mask.bool(), impact, torch.zeros_like(impact))
    return impact


@dataclass
class AdoptedTarget:
    """The target q* of one trajectory (Eq. 10) and, when available, its token impacts.

    `reflected` is u_i; `impact` [T] is None when impacts are unavailable (then Eq. 11 uses the
    uniform mean); `fallback` names why q^R was not adopted or impacts are missing, else None.
    """

    scores: TeacherScores
    reflected: bool
    impact: Tensor | None
    fallback: str | None = None


def adopted_target(
    base: TeacherScores, reflect: TeacherScores | None, aligned: bool = True
) -> AdoptedTarget:
    """q* = q^R when reflection-conditioned scoring exists and is token-aligned, else q^0 (Eq. 10).

    `reflect` is None when there is no reflection or its scoring failed; `aligned` is the result
    of the token-id alignment check (`beacon.train.opd.conditioning.check_alignment`).
    """
    if reflect is None:
        return AdoptedTarget(base, reflected=False, impact=None, fallback="no_reflection")
    if not aligned:
        return AdoptedTarget(base, reflected=False, impact=None, fallback="misaligned")
    if reflect.num_positions != base.num_positions:
        return AdoptedTarget(reflect, reflected=True, impact=None, fallback="impact_length")
    impact = token_impact(reflect.sampled_logprob, base.sampled_logprob)
    if not bool(torch.isfinite(impact).all()):
        return AdoptedTarget(reflect, reflected=True, impact=None, fallback="impact_nonfinite")
    return AdoptedTarget(reflect, reflected=True, impact=impact)
