"""The clipped GRPO loss against a float64 direct computation, and each clipping branch."""

from __future__ import annotations

import math

import pytest
import torch

from beacon.train.grpo.policy import aggregate, grpo_loss, importance_ratio, k3_kl


def _batch(seed: int = 0, b: int = 4, t: int = 7):
    gen = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(b, t, generator=gen, dtype=torch.float64) * 3).requires_grad_(True)
    old = logp.detach() + torch.randn(b, t, generator=gen, dtype=torch.float64) * 0.3
    ref = logp.detach() + torch.randn(b, t, generator=gen, dtype=torch.float64) * 0.2
    adv = torch.randn(b, generator=gen, dtype=torch.float64)
    mask = (torch.rand(b, t, generator=gen) > 0.3).to(torch.float64)
    mask[:, 0] = 0  # the prompt position never carries loss
    mask[0, 1] = 1  # every row has at least one generated token
    return logp, old, ref, adv, mask


def _direct(logp, old, ref, adv, mask, eps_low, eps_high, beta, aggregation) -> float:
    """The module docstring's formulas, written out token by token in Python floats."""
    logp = logp.detach()
    rows = []
    total, tokens = 0.0, 0
    for i in range(logp.shape[0]):
        row_sum, row_len = 0.0, 0
        for t in range(logp.shape[1]):
            if mask[i, t] == 0:
                continue
            r = math.exp(float(logp[i, t]) - float(old[i, t]))
            a = float(adv[i])
            surrogate = min(r * a, min(max(r, 1 - eps_low), 1 + eps_high) * a)
            d = float(ref[i, t]) - float(logp[i, t])
            value = -surrogate + beta * (math.exp(d) - d - 1)
            row_sum, row_len = row_sum + value, row_len + 1
        rows.append(row_sum / row_len)
        total, tokens = total + row_sum, tokens + row_len
    return sum(rows) / len(rows) if aggregation == "sequence_mean" else total / tokens


@pytest.mark.parametrize("aggregation", ["sequence_mean", "token_mean"])
@pytest.mark.parametrize(("eps_high", "beta"), [(None, 0.0), (0.28, 0.0), (None, 0.05)])
def test_matches_direct_float64(aggregation, eps_high, beta) -> None:
    logp, old, ref, adv, mask = _batch()
    out = grpo_loss(
        logp,
        old,
        adv,
        mask,
        clip_eps=0.2,
        clip_eps_high=eps_high,
        ref_logp=ref,
        kl_coef=beta,
        aggregation=aggregation,
    )
    high = 0.2 if eps_high is None else eps_high
    expected = _direct(logp, old, ref, adv, mask, 0.2, high, beta, aggregation)
    assert out.loss.item() == pytest.approx(expected, abs=1e-12)
    assert out.num_tokens == int(mask.sum())


def _single(ratio: float, adv: float, eps: float = 0.2):
    logp = torch.tensor([[0.0, math.log(ratio)]], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(1, 2, dtype=torch.float64)
    mask = torch.tensor([[0.0, 1.0]], dtype=torch.float64)
    out = grpo_loss(logp, old, torch.tensor([adv], dtype=torch.float64), mask, clip_eps=eps)
    out.loss.backward()
    return out, logp.grad[0, 1].item()


@pytest.mark.parametrize(
    ("ratio", "adv", "loss", "clipped"),
    [
        (1.5, 1.0, -1.2, True),  # A > 0, r > 1 + ε: clipped at 1.2, no gradient
        (0.5, 1.0, -0.5, False),  # A > 0, r < 1 - ε: unclipped (min picks r·A)
        (0.5, -1.0, 0.8, True),  # A < 0, r < 1 - ε: clipped at 0.8, no gradient
        (1.5, -1.0, 1.5, False),  # A < 0, r > 1 + ε: unclipped, gradient pushes r down
        (1.1, 2.0, -2.2, False),  # inside the trust region
    ],
)
def test_clipping_branches(ratio, adv, loss, clipped) -> None:
    out, grad = _single(ratio, adv)
    assert out.loss.item() == pytest.approx(loss, abs=1e-12)
    assert out.clip_frac.item() == (1.0 if clipped else 0.0)
    if clipped:
        assert grad == 0.0
    else:
        # d(-r·A)/d logp = -r·A
        assert grad == pytest.approx(-ratio * adv, abs=1e-12)


def test_observation_tokens_carry_no_loss_or_gradient() -> None:
    logp, old, ref, adv, mask = _batch(seed=1)
    out = grpo_loss(logp, old, adv, mask, ref_logp=ref, kl_coef=0.1)
    out.loss.backward()
    assert torch.all(logp.grad[mask == 0] == 0)
    changed = logp.detach().clone()
    changed[mask == 0] += 5.0  # what the model says on masked positions does not matter
    again = grpo_loss(changed, old, adv, mask, ref_logp=ref, kl_coef=0.1)
    assert again.loss.item() == pytest.approx(out.loss.item(), abs=1e-12)


def test_ratio_one_gives_minus_mean_advantage() -> None:
    mask = torch.tensor([[0, 1, 1, 1], [0, 1, 0, 0]], dtype=torch.float64)
    logp = torch.zeros(2, 4, dtype=torch.float64)
    adv = torch.tensor([1.0, -3.0], dtype=torch.float64)
    seq = grpo_loss(logp, logp, adv, mask, aggregation="sequence_mean")
    tok = grpo_loss(logp, logp, adv, mask, aggregation="token_mean")
    assert seq.loss.item() == pytest.approx(-(1.0 - 3.0) / 2)  # each sequence weighs 1/B
    assert tok.loss.item() == pytest.approx(-(3 * 1.0 - 3.0) / 4)  # each token weighs 1/N
    assert seq.ratio_mean.item() == 1.0 and seq.clip_frac.item() == 0.0 and seq.kl.item() == 0.0


@pytest.mark.parametrize("aggregation", ["sequence_mean", "token_mean"])
def test_micro_batches_with_normalizer_add_up_to_the_full_batch(aggregation) -> None:
    logp, old, _ref, adv, mask = _batch(seed=2, b=6)
    full = grpo_loss(logp, old, adv, mask, aggregation=aggregation).loss
    norm = 6.0 if aggregation == "sequence_mean" else float(mask.sum())
    parts = [
        grpo_loss(logp[s], old[s], adv[s], mask[s], aggregation=aggregation, normalizer=norm).loss
        for s in (slice(0, 1), slice(1, 4), slice(4, 6))
    ]
    assert sum(p.item() for p in parts) == pytest.approx(full.item(), abs=1e-12)


def test_k3_is_zero_at_equality_and_nonnegative() -> None:
    x = torch.linspace(-3, 0, 7, dtype=torch.float64)
    assert torch.all(k3_kl(x, x) == 0)
    assert torch.all(k3_kl(x, x.flip(0)) >= 0)
    # hand value: ref - logp = 1 -> e - 2
    assert k3_kl(torch.tensor([0.0]), torch.tensor([1.0])).item() == pytest.approx(math.e - 2)


def test_kl_without_reference_is_an_error() -> None:
    logp = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="kl_coef"):
        grpo_loss(logp, logp, torch.zeros(1), torch.ones(1, 2), kl_coef=0.1)


def test_importance_ratio_is_one_off_mask() -> None:
    logp = torch.tensor([[0.0, -1.0]])
    old = torch.tensor([[-50.0, -2.0]])
    ratio = importance_ratio(logp, old, torch.tensor([[0, 1]]))
    assert ratio.tolist()[0] == pytest.approx([1.0, math.e])


def test_aggregate_rejects_unknown_mode() -> None:
    with pytest.raises(ValueError, match="aggregation"):
        aggregate(torch.zeros(1, 1), torch.ones(1, 1), "sum")


@pytest.mark.parametrize("aggregation", ["sequence_mean", "token_mean"])
def test_a_first_step_every_rollout_shares_gets_no_net_push(aggregation: str) -> None:
    """Why the demo's HGCE gate G-H4 counts split groups, not mixed outcomes: with group-relative
    advantages (sum 0), the loss's gradient on a first token every rollout of the group sampled
    from the same prefix is 0 whatever the rewards (equal lengths); when the group splits on it,
    the rollouts that took the rewarded step push it up."""
    from beacon.train.grpo.group_scoring import group_advantages

    def first_step_grad(choices: list[int], rewards: list[float]) -> torch.Tensor:
        theta = torch.zeros(2, requires_grad=True)  # logits of the first step: key (0) or cell (1)
        first = torch.log_softmax(theta, 0)[torch.tensor(choices)]
        rest = torch.full((len(choices), 3), -0.5)
        logp = torch.cat([first.unsqueeze(1), rest], dim=1)
        adv = group_advantages(torch.tensor(rewards), torch.zeros(len(choices), dtype=torch.long))
        mask = torch.ones_like(logp)
        grpo_loss(logp, logp.detach(), adv, mask, aggregation=aggregation).loss.backward()
        return theta.grad

    shared = first_step_grad([0, 0, 0, 0], [1.0, 1.0, 0.0, 1.0])  # mixed outcomes, no split
    assert torch.allclose(shared, torch.zeros(2), atol=1e-7)
    split = first_step_grad([0, 0, 1, 1], [1.0, 1.0, 0.0, 0.0])  # key first and right
    assert split[0] < 0 < split[1]  # descent raises the key's logit
