"""ReVuE's loss: the teacher's top-K support (Eq. 8), token impact and the adopted target
(Eq. 7, 10), the per-position weights (Eq. 9, 11), the top-K reverse KL (Eq. 8, 11).

**Teacher top-K.** Per supervised position the loss needs the adopted teacher's top-K ids and
their log-probs (the support of Eq. 8), and the impact needs the sampled token's log-prob under
both teachers (Eq. 7). All are full-vocabulary normalised, so each position needs one logsumexp
over the vocabulary, but nothing needs the [T, V] log-softmax kept: `teacher_topk` computes
logits for `chunk_size` positions at a time (from the teacher's final hidden states and output
projection), reduces them and drops them, so peak memory is chunk_size x V instead of T x V.
Runs under no_grad: the teacher is frozen and its targets are constants of the student update
(Appendix A.7).

**Support.** The student side of the loss: logits on the teacher's K support tokens only.

Eq. 8 renormalises the student over the support, so it needs z[t, S_t] = hidden[t] . W[S_t] + b,
K dot products per position, not the [T, V] logits (151k x T for Qwen) and their log-softmax.
`support_logits` gathers the K rows of the output projection per position, `chunk_size` positions
at a time, in a custom autograd function whose backward recomputes the gather chunk by chunk:
nothing of size T x K x H or T x V is kept for backward, only the inputs. The weight gradient is
accumulated with `index_add_` into one dense [V, H] tensor (the same one any lm-head training
materialises).

Limits: the gathered rows are multiplied in the input dtype (bf16 rows give bf16 dot products,
as the model's own lm_head would); logits come back in that dtype and `topk_reverse_kl` works in
float32 for half inputs.

**The reverse KL**: the OPD loss on the teacher's top-K support, Eq. 8 per position, Eq. 11 per
trajectory.

For one position with support S = TopK(q*) (K = 32, the sampled token not forced in):

    p^S(v) = p(v) / sum_{u in S} p(u),   q^S(v) = q*(v) / sum_{u in S} q*(u)
    l_t = KL(p^S || q^S) = sum_{v in S} p^S(v) (log p^S(v) - log q^S(v))            (Eq. 8)

Renormalising over S means log p^S(v) = z_v - logsumexp_{u in S} z_u for student logits z: the
student's full-vocabulary log-softmax is never needed, only its logits on the K support tokens
(`support_logits` computes exactly those from hidden states). The trajectory loss is
(w * l).mean() with the weights of Eq. 9 (below), and the batch loss the mean over retained
trajectories, each counting once (Eq. 8's 1/|G|). Pure OPD: no reward term and no reference KL
(Appendix A.7).

**Weights**: ReVuE's grouped weights (Eq. 9, 11) and the paper's interventions.

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

**Impact**: token impact (Eq. 7) and the adopted teacher target (Eq. 10).

The reflection-conditioned teacher q^R is adopted (u_i = 1) only when reflection exists, its
scoring succeeded and the completion re-encoded to the student's exact token ids (Appendix A.3);
otherwise the base teacher q^0 is the target and no impact exists for the trajectory. An impact
that cannot be computed (wrong length, non-finite values) keeps q^R as the target and only turns
grouping off (b_i = 0 in Eq. 11).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor


@dataclass
class TeacherScores:
    """One teacher's reduced scores on one trajectory's supervised positions.

    `topk_ids` [T, K] and `topk_logprobs` [T, K]: the K most likely tokens and their
    full-vocabulary log-probs, descending; `sampled_logprob` [T]: log q(y_t) of the student's
    sampled token, full-vocabulary normalised.
    """

    topk_ids: Tensor
    topk_logprobs: Tensor
    sampled_logprob: Tensor

    @property
    def num_positions(self) -> int:
        """Supervised positions scored (rows of every tensor here)."""
        return int(self.sampled_logprob.shape[0])


def reduce_logits(logits: Tensor, sampled_ids: Tensor, k: int) -> TeacherScores:
    """Reduce full-vocabulary teacher logits [T, V] to top-K and the sampled token's log-prob.

    Computed in float32 at least (a bf16 logsumexp over 151k entries loses ~3 digits).
    """
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    log_z = torch.logsumexp(logits, dim=-1, keepdim=True)
    top_logits, top_ids = torch.topk(logits, min(k, logits.shape[-1]), dim=-1)
    sampled = logits.gather(-1, sampled_ids.unsqueeze(-1)) - log_z
    return TeacherScores(top_ids, top_logits - log_z, sampled.squeeze(-1))


@torch.no_grad()
def teacher_topk(
    hidden: Tensor,
    weight: Tensor,
    sampled_ids: Tensor,
    k: int = 32,
    chunk_size: int = 128,
    bias: Tensor | None = None,
) -> TeacherScores:
    """Teacher scores from final hidden states [T, H] and the output projection `weight` [V, H].

    `hidden[t]` is the state that predicts `sampled_ids[t]` (already shifted by the caller).
    Equal to `reduce_logits(hidden @ weight.T + bias, ...)` while holding only one
    [chunk_size, V] block of logits at a time.
    """
    if chunk_size < 1:
        raise ValueError(f"revue.chunk_size={chunk_size} must be >= 1.")
    parts = []
    for start in range(0, hidden.shape[0], chunk_size):
        block = hidden[start : start + chunk_size] @ weight.T
        if bias is not None:
            block = block + bias
        parts.append(reduce_logits(block, sampled_ids[start : start + chunk_size], k))
    if not parts:
        empty = hidden.new_zeros((0, min(k, weight.shape[0])), dtype=torch.float32)
        return TeacherScores(empty.long(), empty, empty[:, 0])
    return TeacherScores(
        torch.cat([p.topk_ids for p in parts]),
        torch.cat([p.topk_logprobs for p in parts]),
        torch.cat([p.sampled_logprob for p in parts]),
    )


class _SupportLogits(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        hidden: Tensor,
        weight: Tensor,
        support_ids: Tensor,
        bias: Tensor | None,
        chunk_size: int,
    ) -> Tensor:
        out = hidden.new_empty(support_ids.shape)
        for start in range(0, hidden.shape[0], chunk_size):
            rows = slice(start, start + chunk_size)
            ids = support_ids[rows]
            out[rows] = torch.einsum("ckh,ch->ck", weight[ids], hidden[rows])
        if bias is not None:
            out = out + bias[support_ids]
        ctx.save_for_backward(hidden, weight, support_ids)
        ctx.has_bias, ctx.chunk_size = bias is not None, chunk_size
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        hidden, weight, support_ids = ctx.saved_tensors
        need_h, need_w, _, need_b, _ = ctx.needs_input_grad
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros_like(weight) if need_w else None
        for start in range(0, hidden.shape[0], ctx.chunk_size):
            rows = slice(start, start + ctx.chunk_size)
            ids, g = support_ids[rows], grad_out[rows].to(weight.dtype)
            if grad_h is not None:
                grad_h[rows] = torch.einsum("ck,ckh->ch", g, weight[ids])
            if grad_w is not None:
                outer = g.unsqueeze(-1) * hidden[rows].unsqueeze(1)  # [c, K, H]
                grad_w.index_add_(0, ids.reshape(-1), outer.reshape(-1, hidden.shape[-1]))
        grad_b = None
        if ctx.has_bias and need_b:
            grad_b = weight.new_zeros(weight.shape[0])
            grad_b.index_add_(0, support_ids.reshape(-1), grad_out.reshape(-1).to(grad_b.dtype))
        return grad_h, grad_w, None, grad_b, None


def support_logits(
    hidden: Tensor,
    weight: Tensor,
    support_ids: Tensor,
    bias: Tensor | None = None,
    chunk_size: int = 64,
) -> Tensor:
    """Student logits z[t, k] = hidden[t] . weight[support_ids[t, k]] (+ bias), shape [T, K].

    `hidden` [T, H] are the student's final hidden states at the supervised positions, `weight`
    [V, H] its output projection (lm_head), `support_ids` [T, K] the adopted teacher's top-K ids.
    Differentiable in `hidden`, `weight` and `bias`; equal to
    `(hidden @ weight.T + bias).gather(-1, support_ids)` with peak extra memory of one
    [chunk_size, K, H] block instead of [T, V].
    """
    if chunk_size < 1:
        raise ValueError(f"revue.chunk_size={chunk_size} must be >= 1.")
    if support_ids.shape[0] != hidden.shape[0]:
        raise ValueError(
            f"support_ids covers {support_ids.shape[0]} positions but hidden has "
            f"{hidden.shape[0]}; both must be the trajectory's supervised positions."
        )
    return _SupportLogits.apply(hidden, weight, support_ids, bias, chunk_size)


def topk_reverse_kl(student_support_logits: Tensor, teacher_logprobs: Tensor) -> Tensor:
    """Per-position reverse KL(p^S || q^S) of Eq. 8 from logits already restricted to the support.

    `student_support_logits` [T, K] are the student's logits on the teacher's support ids,
    `teacher_logprobs` [T, K] the teacher's log-probs on them (any normalisation: they are
    renormalised here). Returns [T], differentiable in the student logits.
    """
    if student_support_logits.dtype in (torch.float16, torch.bfloat16):
        student_support_logits = student_support_logits.float()
    log_p = torch.log_softmax(student_support_logits, dim=-1)
    log_q = torch.log_softmax(teacher_logprobs.to(log_p.dtype), dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(dim=-1)


def support_reverse_kl(
    student_logits: Tensor, support_ids: Tensor, teacher_logprobs: Tensor
) -> Tensor:
    """Per-position reverse KL of Eq. 8 for full student logits [T, V].

    `support_ids` [T, K] are the adopted teacher's top-K ids, `teacher_logprobs` [T, K] its
    log-probs on them; both sides are renormalised over the support. Returns [T].
    """
    return topk_reverse_kl(student_logits.gather(-1, support_ids), teacher_logprobs)


def trajectory_loss(kl: Tensor, weights: Tensor) -> Tensor:
    """l_i = (1/|T_i|) sum_t w_t l_t  (Eq. 8/11): the weighted mean over supervised positions."""
    if kl.shape != weights.shape:
        raise ValueError(
            f"per-position KL has shape {tuple(kl.shape)} but weights {tuple(weights.shape)}; "
            "both must cover the same supervised positions."
        )
    return (weights.to(kl.dtype) * kl).mean()


def batch_loss(trajectory_losses: Sequence[Tensor]) -> Tensor:
    """L = mean over retained trajectories of l_i (Algorithm 1, line 22); 0 if none is retained.

    The zero for an empty batch carries no graph: the caller skips backward for it.
    """
    if not trajectory_losses:
        return torch.zeros(())
    return torch.stack(list(trajectory_losses)).mean()


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
    of the token-id alignment check (`beacon.train.opd.score.check_alignment`).
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
