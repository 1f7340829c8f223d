"""Token impact (Eq. 7) and the adopted teacher target (Eq. 10).

The reflection-conditioned teacher q^R is adopted (u_i = 1) only when reflection exists, its
scoring succeeded and the completion re-encoded to the student's exact token ids (Appendix A.3);
otherwise the base teacher q^0 is the target and no impact exists for the trajectory. An impact
that cannot be computed (wrong length, non-finite values) keeps q^R as the target and only turns
grouping off (b_i = 0 in Eq. 11).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from beacon.revue.teacher import TeacherScores


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
    of the token-id alignment check (`beacon.revue.conditioning.check_alignment`).
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
