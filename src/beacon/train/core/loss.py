"""The SFT objective: token-level cross-entropy on loss-mask tokens, normalised per step.

    L = (1 / N) * sum_{rows b} sum_{t : m_bt = 1} -log p_theta(y_bt | y_<bt, images)      (1)

where N is the number of target tokens in the whole optimizer step, over all micro-batches and
all processes. Normalising by the step's N (not per micro-batch or per row) makes the loss and
its gradient independent of how the step is split: 8 x 1 equals 1 x 8, bucketed equals padded,
and 2 processes equal 1 (the invariants the tests check). Every target token weighs the same,
as in the "token-mean" cross-entropy of the cold-start recipe (beacon.md §3).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from beacon.train.core.collate import IGNORE_INDEX


def summed_token_nll(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """sum of -log p(y_t) over target tokens of one micro-batch (the inner sums of Eq. 1).

    `logits` [B, T, V] predict the next token; `labels` [B, T] hold the target id at each
    position or IGNORE_INDEX. The shift by one happens here. Computed in float32.
    """
    shifted_logits = logits[:, :-1, :].float()
    shifted_labels = labels[:, 1:]
    return F.cross_entropy(
        shifted_logits.reshape(-1, shifted_logits.shape[-1]),
        shifted_labels.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="sum",
    )


def count_targets(labels: torch.Tensor) -> int:
    """Target tokens of a micro-batch after the shift (the first position predicts nothing)."""
    return int((labels[:, 1:] != IGNORE_INDEX).sum())
