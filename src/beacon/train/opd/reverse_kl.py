"""The OPD loss on the teacher's top-K support: Eq. 8 per position, Eq. 11 per trajectory.

For one position with support S = TopK(q*) (K = 32, the sampled token not forced in):

    p^S(v) = p(v) / sum_{u in S} p(u),   q^S(v) = q*(v) / sum_{u in S} q*(u)
    l_t = KL(p^S || q^S) = sum_{v in S} p^S(v) (log p^S(v) - log q^S(v))            (Eq. 8)

Renormalising over S means log p^S(v) = z_v - logsumexp_{u in S} z_u for student logits z: the
student's full-vocabulary log-softmax is never needed, only its logits on the K support tokens
(`beacon.train.opd.topk.support_logits` computes exactly those from hidden states). The trajectory
loss is (w * l).mean() with the weights of Eq. 9 (`beacon.train.opd.impact_weights`), and the batch
loss the mean over retained trajectories, each counting once (Eq. 8's 1/|G|). Pure OPD: no reward
term and no reference KL (Appendix A.7).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


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
