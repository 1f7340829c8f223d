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

Interventions (Appendix C.2, Table 10) are further weight functions of the same signature, picked
by name from `WEIGHTINGS`: masked positions get weight 0 and every kept group keeps its total
weight (so their mean weight is below 1, as the paper's "total group loss weight 0.5" says).
ceil(alpha|T|) is computed on alpha|T| rounded to 9 decimals, so 0.1 x 30 gives 3, not 4.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor


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


def _two_groups(
    high: Tensor, num_positions: int, lam: float, like: Tensor | None, drop: Tensor | None = None
) -> Weights:
    """Eq. 9 weights for a High index set; positions in `drop` (masked) get 0 and leave Low."""
    in_high = torch.zeros(num_positions, dtype=torch.bool)
    in_high[high] = True
    in_low = ~in_high
    if drop is not None:
        in_low[drop] = False
    n_high, n_low = int(in_high.sum()), int(in_low.sum())
    if n_high == 0 or n_low == 0:
        return _uniform(num_positions, "empty_group", like)
    weights = _uniform(num_positions, None, like).weights.zero_()
    weights[in_high.to(weights.device)] = lam * num_positions / n_high
    weights[in_low.to(weights.device)] = (1 - lam) * num_positions / n_low
    return Weights(weights)


def revue_weights(
    impact: Tensor | None,
    num_positions: int,
    alpha: float = 0.2,
    lam: float = 0.5,
    generator: torch.Generator | None = None,
) -> Weights:
    """ReVuE's grouped weights (Eq. 9), with the uniform fallback of Eq. 11 (b_i = 0)."""
    _check(alpha, lam)
    problem = _impact_problem(impact, num_positions)
    if problem is not None:
        return _uniform(num_positions, problem, impact)
    high = impact_order(impact.cpu())[: high_count(num_positions, alpha)]
    return _two_groups(high, num_positions, lam, impact)


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


def uniform_weights(
    impact: Tensor | None,
    num_positions: int,
    alpha: float = 0.2,
    lam: float = 0.5,
    generator: torch.Generator | None = None,
) -> Weights:
    """Vanilla OPD and "reflection without reweighting": the plain mean of Eq. 3."""
    return _uniform(num_positions, None, impact)


def random_select_weights(
    impact: Tensor | None,
    num_positions: int,
    alpha: float = 0.2,
    lam: float = 0.5,
    generator: torch.Generator | None = None,
) -> Weights:
    """Random select: a random ceil(alpha|T|) positions take High's place (Table 10)."""
    _check(alpha, lam)
    if num_positions < 2:
        return _uniform(num_positions, "too_short", impact)
    high = torch.randperm(num_positions, generator=generator)[: high_count(num_positions, alpha)]
    return _two_groups(high, num_positions, lam, impact)


def mask_random_weights(
    impact: Tensor | None,
    num_positions: int,
    alpha: float = 0.2,
    lam: float = 0.5,
    generator: torch.Generator | None = None,
) -> Weights:
    """Mask random: drop a random ceil(alpha|T|); the rest share total weight 1 - lam."""
    _check(alpha, lam)
    if num_positions < 2:
        return _uniform(num_positions, "too_short", impact)
    drop = torch.randperm(num_positions, generator=generator)[: high_count(num_positions, alpha)]
    return _masked(drop, num_positions, lam, impact)


def _masked(drop: Tensor, num_positions: int, lam: float, like: Tensor | None) -> Weights:
    keep = torch.ones(num_positions, dtype=torch.bool)
    keep[drop] = False
    if not bool(keep.any()):
        return _uniform(num_positions, "empty_group", like)
    weights = _uniform(num_positions, None, like).weights
    weights[~keep.to(weights.device)] = 0.0
    weights[keep.to(weights.device)] = (1 - lam) * num_positions / int(keep.sum())
    return Weights(weights)


def mask_top_weights(
    impact: Tensor | None,
    num_positions: int,
    alpha: float = 0.2,
    lam: float = 0.5,
    generator: torch.Generator | None = None,
) -> Weights:
    """Mask top: High gets weight 0; Low keeps its Eq. 9 weight (1 - lam)|T|/|Low|."""
    _check(alpha, lam)
    problem = _impact_problem(impact, num_positions)
    if problem is not None:
        return _uniform(num_positions, problem, impact)
    drop = impact_order(impact.cpu())[: high_count(num_positions, alpha)]
    return _masked(drop, num_positions, lam, impact)


def mask_low_weights(
    impact: Tensor | None,
    num_positions: int,
    alpha: float = 0.2,
    lam: float = 0.5,
    generator: torch.Generator | None = None,
) -> Weights:
    """Mask low: the last ceil(alpha|T|) of the ranking get 0; High keeps lam, the rest 1 - lam."""
    _check(alpha, lam)
    problem = _impact_problem(impact, num_positions)
    if problem is not None:
        return _uniform(num_positions, problem, impact)
    order = impact_order(impact.cpu())
    n = high_count(num_positions, alpha)
    drop = order[max(n, num_positions - n) :]  # never mask a High position (alpha > 0.5)
    return _two_groups(order[:n], num_positions, lam, impact, drop=drop)


WEIGHTINGS: dict[str, WeightFn] = {
    "revue": revue_weights,
    "uniform": uniform_weights,
    "random_select": random_select_weights,
    "mask_random": mask_random_weights,
    "mask_top": mask_top_weights,
    "mask_low": mask_low_weights,
}
"""Weight functions by config name (`revue.weighting`)."""
