"""The teacher side of the loss: full-vocabulary logits reduced, in chunks, to what ReVuE needs.

Per supervised position the loss needs the adopted teacher's top-K ids and their log-probs (the
support of Eq. 8), and the impact needs the sampled token's log-prob under both teachers (Eq. 7).
All are full-vocabulary normalised, so each position needs one logsumexp over the vocabulary, but
nothing needs the [T, V] log-softmax kept: `teacher_topk` computes logits for `chunk_size`
positions at a time (from the teacher's final hidden states and output projection), reduces them
and drops them, so peak memory is chunk_size x V instead of T x V. Runs under no_grad: the teacher
is frozen and its targets are constants of the student update (Appendix A.7).

Support: The student side of the loss: logits on the teacher's K support tokens only.

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

The reverse KL: the OPD loss on the teacher's top-K support, Eq. 8 per position, Eq. 11 per
trajectory.

For one position with support S = TopK(q*) (K = 32, the sampled token not forced in):

    p^S(v) = p(v) / sum_{u in S} p(u),   q^S(v) = q*(v) / sum_{u in S} q*(u)
    l_t = KL(p^S || q^S) = sum_{v in S} p^S(v) (log p^S(v) - log q^S(v))            (Eq. 8)

Renormalising over S means log p^S(v) = z_v - logsumexp_{u in S} z_u for student logits z: the
student's full-vocabulary log-softmax is never needed, only its logits on the K support tokens
(`support_logits` computes exactly those from hidden states). The trajectory
loss is (w * l).mean() with the weights of Eq. 9 (`beacon.train.opd.impact_weights`), and the batch
loss the mean over retained trajectories, each counting once (Eq. 8's 1/|G|). Pure OPD: no reward
term and no reference KL (Appendix A.7).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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
