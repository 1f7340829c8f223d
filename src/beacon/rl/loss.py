"""The clipped GRPO objective at token level, with an optional k3 KL to a reference model.

Notation (DeepSeekMath GRPO, Eq. 3; the Beacon paper §3 "策略优化" uses "the clipped GRPO
objective" without further detail): response i of the batch has tokens o_{i,t}, t = 1..|o_i|,
only generated tokens count (mask m_{i,t} = 1; prompt and observation tokens are 0).

    r_{i,t} = exp(log π_θ(o_{i,t}) - log π_old(o_{i,t}))                          (ratio)
    s_{i,t} = min(r_{i,t} · A_i, clip(r_{i,t}, 1 - ε_low, 1 + ε_high) · A_i)      (surrogate)
    k3_{i,t} = exp(log π_ref - log π_θ) - (log π_ref - log π_θ) - 1  >= 0       (Schulman's k3)
    ℓ_{i,t} = -s_{i,t} + β · k3_{i,t}

Aggregation (`rl.loss.aggregation`):
    sequence_mean:  L = 1/B Σ_i 1/|o_i| Σ_t m_{i,t} ℓ_{i,t}       (GRPO as published; default)
    token_mean:     L = Σ_{i,t} m_{i,t} ℓ_{i,t} / Σ_{i,t} m_{i,t}   (DAPO; long answers weigh more)
The Beacon paper does not say which it uses; "the clipped GRPO objective" as defined is
sequence_mean, so that is the default.

Gradient accumulation: pass `normalizer` (the number of sequences, or of generated tokens, in the
whole optimizer batch) so that micro-batch losses add up to the full-batch loss exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from beacon.rl.config import Aggregation


@dataclass(frozen=True)
class GRPOLossOutput:
    """The loss to backpropagate and what to log about it.

    loss: scalar with grad. policy_loss and kl: the two terms (kl before β), aggregated like the
    loss, detached. clip_frac: share of generated tokens whose clipped term is the active one.
    ratio_mean / ratio_max: of r over generated tokens. num_tokens: generated tokens counted.
    """

    loss: Tensor
    policy_loss: Tensor
    kl: Tensor
    clip_frac: Tensor
    ratio_mean: Tensor
    ratio_max: Tensor
    num_tokens: int


def importance_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """r_{i,t} = exp(log π_θ - log π_old) where mask is 1, exactly 1 elsewhere; shapes [B, T].

    For an HGCE response, `logp` is computed with the original prompt and `old_logp` with the
    hinted prompt it was sampled from (`beacon.rl.hgce`), position-aligned on the response.
    """
    delta = torch.where(mask.bool(), logp - old_logp, torch.zeros_like(logp))
    return delta.exp()


def k3_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 = exp(ref - logp) - (ref - logp) - 1 per token, an unbiased, non-negative KL estimate."""
    diff = ref_logp - logp
    return diff.exp() - diff - 1.0


def aggregate(
    values: Tensor, mask: Tensor, aggregation: Aggregation, normalizer: float | None = None
) -> Tensor:
    """Masked mean of per-token values [B, T] by `aggregation` (see the module docstring).

    normalizer: divide by this instead of the local number of sequences (sequence_mean) or
    tokens (token_mean), for exact gradient accumulation over micro-batches.
    """
    mask = mask.to(values.dtype)
    if aggregation == "sequence_mean":
        lengths = mask.sum(dim=1).clamp(min=1.0)
        total = ((values * mask).sum(dim=1) / lengths).sum()
        count = values.new_tensor(float(values.shape[0]))
    elif aggregation == "token_mean":
        total = (values * mask).sum()
        count = mask.sum().clamp(min=1.0)
    else:
        raise ValueError(f"rl.loss.aggregation={aggregation!r}; use sequence_mean or token_mean")
    return total / (count if normalizer is None else normalizer)


def grpo_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
    aggregation: Aggregation = "sequence_mean",
    normalizer: float | None = None,
) -> GRPOLossOutput:
    """Clipped GRPO loss over generated tokens (module docstring; DeepSeekMath Eq. 3).

    logp, old_logp, ref_logp: log-probs of the sampled tokens, [B, T] (old and ref detached);
    advantages: [B], one per sequence; mask: [B, T], 1 on generated tokens only. `ref_logp` is
    needed only when kl_coef > 0.
    """
    if kl_coef > 0 and ref_logp is None:
        raise ValueError(
            "rl.loss.kl_coef > 0 needs reference log-probs; pass ref_logp or set kl_coef=0"
        )
    high = clip_eps if clip_eps_high is None else clip_eps_high
    ratio = importance_ratio(logp, old_logp.detach(), mask)
    adv = advantages.to(logp.dtype).unsqueeze(1)
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + high) * adv
    policy = -torch.minimum(unclipped, clipped)
    kl = k3_kl(logp, ref_logp.detach()) if ref_logp is not None else torch.zeros_like(logp)
    per_token = policy + kl_coef * kl if kl_coef > 0 else policy
    loss = aggregate(per_token, mask, aggregation, normalizer)
    with torch.no_grad():
        on = mask.bool()
        num_tokens = int(on.sum().item())
        ratio_on = ratio[on] if num_tokens else ratio.new_ones(1)
        return GRPOLossOutput(
            loss=loss,
            policy_loss=aggregate(policy, mask, aggregation, normalizer),
            kl=aggregate(kl, mask, aggregation, normalizer),
            clip_frac=((clipped < unclipped) & on).sum() / max(num_tokens, 1),
            ratio_mean=ratio_on.mean(),
            ratio_max=ratio_on.max(),
            num_tokens=num_tokens,
        )
