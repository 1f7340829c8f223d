"""The teacher side of the loss: full-vocabulary logits reduced, in chunks, to what ReVuE needs.

Per supervised position the loss needs the adopted teacher's top-K ids and their log-probs (the
support of Eq. 8), and the impact needs the sampled token's log-prob under both teachers (Eq. 7).
All are full-vocabulary normalised, so each position needs one logsumexp over the vocabulary, but
nothing needs the [T, V] log-softmax kept: `teacher_topk` computes logits for `chunk_size`
positions at a time (from the teacher's final hidden states and output projection), reduces them
and drops them, so peak memory is chunk_size x V instead of T x V. Runs under no_grad: the teacher
is frozen and its targets are constants of the student update (Appendix A.7).
"""

from __future__ import annotations

from dataclasses import dataclass

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
