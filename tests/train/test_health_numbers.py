"""The numbers behind the health alarms (`beacon.train.core.health`), against direct float64
formulas."""

from __future__ import annotations

import math

import torch

from beacon.train.core.health import (
    chunked_logprob_entropy,
    entropy_sum,
    group_health,
    logprob_gap_sum,
)
from beacon.train.core.outcomes import GroupOutcomes


def test_logprob_gap_sums_over_the_mask_where_the_sampler_gave_a_value() -> None:
    trainer = torch.tensor([[0.0, -1.0, -2.0, -0.5]])
    sampler = torch.tensor([[0.0, -1.5, float("nan"), -0.25]])
    mask = torch.tensor([[0, 1, 1, 1]])
    total, tokens = logprob_gap_sum(trainer, sampler, mask)
    assert tokens == 2 and math.isclose(total, 0.75)


def test_entropy_sum_is_the_entropy_of_the_distribution_that_predicts_each_masked_token() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7, dtype=torch.float64)
    mask = torch.tensor([[0, 1, 1, 0, 1], [0, 0, 1, 1, 1]])
    total, tokens = entropy_sum(logits, mask, chunk_size=2)
    p = logits.softmax(-1)
    h = -(p * p.log()).sum(-1)  # h[b, t] predicts token t + 1
    expected = sum(float(h[b, t - 1]) for b in range(2) for t in range(5) if mask[b, t])
    assert tokens == 6 and math.isclose(total, expected, rel_tol=1e-6)


def test_chunked_logprob_and_entropy_equal_the_full_vocabulary_ones() -> None:
    torch.manual_seed(1)
    hidden, weight, bias = torch.randn(9, 4), torch.randn(11, 4), torch.randn(11)
    ids = torch.randint(0, 11, (9,))
    logp, entropy = chunked_logprob_entropy(hidden, weight, ids, chunk_size=4, bias=bias)
    full = torch.log_softmax(hidden @ weight.T + bias, -1)
    assert torch.allclose(logp, full.gather(-1, ids[:, None])[:, 0], atol=1e-6)
    assert torch.allclose(entropy, -(full.exp() * full).sum(-1), atol=1e-6)


def test_group_health_reads_item_labels_and_skips_hinted_groups() -> None:
    easy = GroupOutcomes.of([True, False], [True, True], label="easy")
    hard = GroupOutcomes.of([False, False], [False, True], label="hard")
    hinted = GroupOutcomes.of([True, True], [True, True], label="hard", hinted=True)
    out = group_health([easy, hard, hinted], rewards=[[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    assert out == {
        "health/tool_rate": 0.75,
        "health/tool_rate_easy": 1.0,
        "health/tool_rate_hard": 0.5,
        "health/zero_variance_groups": 0.5,
    }
    assert math.isnan(group_health([hard])["health/tool_rate_easy"])
