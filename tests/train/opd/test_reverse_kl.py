"""The efficient loss against a direct full-vocabulary reference (float64, atol 1e-6)."""

from __future__ import annotations

import math

import pytest
import torch

from beacon.train.opd.revue_loss import (
    adopted_target,
    batch_loss,
    grouped_weights,
    reduce_logits,
    support_logits,
    support_reverse_kl,
    teacher_topk,
    token_impact,
    topk_reverse_kl,
    trajectory_loss,
)

T, V, H, K = 37, 300, 16, 8


def reference_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor, k: int):
    """Eq. 8 written out: full softmaxes, restrict to TopK(q), renormalise, KL(p^S || q^S)."""
    p = torch.softmax(student_logits, -1)
    q = torch.softmax(teacher_logits, -1)
    support = torch.topk(q, k, dim=-1).indices
    p_s = p.gather(-1, support)
    q_s = q.gather(-1, support)
    p_s, q_s = p_s / p_s.sum(-1, keepdim=True), q_s / q_s.sum(-1, keepdim=True)
    return (p_s * (p_s / q_s).log()).sum(-1)


@pytest.fixture
def inputs() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, dtype=torch.float64, generator=gen)

    return {
        "hidden": rnd(T, H).requires_grad_(True),
        "weight": (0.5 * rnd(V, H)).requires_grad_(True),
        "t_hidden_base": rnd(T, H),
        "t_hidden_refl": rnd(T, H),
        "t_weight": 0.5 * rnd(V, H),
        "sampled": torch.randint(0, V, (T,), generator=gen),
    }


def test_efficient_trajectory_loss_equals_full_vocabulary_reference(inputs) -> None:
    x = inputs
    # efficient path: chunked teacher reduction, K-row student gather, Eq. 9 weights
    base = teacher_topk(x["t_hidden_base"], x["t_weight"], x["sampled"], K, chunk_size=10)
    refl = teacher_topk(x["t_hidden_refl"], x["t_weight"], x["sampled"], K, chunk_size=10)
    target = adopted_target(base, refl, aligned=True)
    z = support_logits(x["hidden"], x["weight"], target.scores.topk_ids, chunk_size=7)
    kl = topk_reverse_kl(z, target.scores.topk_logprobs)
    loss = trajectory_loss(kl, grouped_weights(target.impact))
    g_h, g_w = torch.autograd.grad(loss, [x["hidden"], x["weight"]])

    # reference: everything at full vocabulary
    t_base = x["t_hidden_base"] @ x["t_weight"].T
    t_refl = x["t_hidden_refl"] @ x["t_weight"].T
    logq = lambda logits: torch.log_softmax(logits, -1).gather(-1, x["sampled"][:, None])[:, 0]  # noqa: E731
    impact = (logq(t_refl) - logq(t_base)).abs()
    ref_kl = reference_kl(x["hidden"] @ x["weight"].T, t_refl, K)
    n_high = 8  # ceil(0.2 * 37)
    w = torch.full((T,), 0.5 * T / (T - n_high), dtype=torch.float64)
    w[torch.sort(impact, descending=True, stable=True).indices[:n_high]] = 0.5 * T / n_high
    ref_loss = (w * ref_kl).mean()
    r_h, r_w = torch.autograd.grad(ref_loss, [x["hidden"], x["weight"]])

    torch.testing.assert_close(target.impact, impact, atol=1e-6, rtol=0)
    torch.testing.assert_close(kl, ref_kl, atol=1e-6, rtol=0)
    torch.testing.assert_close(loss, ref_loss, atol=1e-6, rtol=0)
    torch.testing.assert_close(g_h, r_h, atol=1e-6, rtol=0)
    torch.testing.assert_close(g_w, r_w, atol=1e-6, rtol=0)


def test_support_reverse_kl_public_api_matches_reference(inputs) -> None:
    logits = inputs["hidden"] @ inputs["weight"].T
    teacher = inputs["t_hidden_base"] @ inputs["t_weight"].T
    scores = reduce_logits(teacher, inputs["sampled"], K)
    kl = support_reverse_kl(logits, scores.topk_ids, scores.topk_logprobs)
    torch.testing.assert_close(kl, reference_kl(logits, teacher, K), atol=1e-6, rtol=0)
    assert kl.requires_grad and bool((kl >= -1e-12).all())


def test_support_logits_gradcheck_with_bias() -> None:
    gen = torch.Generator().manual_seed(2)
    hidden = torch.randn(5, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    weight = torch.randn(11, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    bias = torch.randn(11, dtype=torch.float64, generator=gen, requires_grad=True)
    ids = torch.randint(0, 11, (5, 4), generator=gen)  # repeated ids exercise index_add_
    assert torch.autograd.gradcheck(
        lambda h, w, b: support_logits(h, w, ids, b, chunk_size=2), (hidden, weight, bias)
    )
    full = (hidden @ weight.T + bias).gather(-1, ids)
    torch.testing.assert_close(support_logits(hidden, weight, ids, bias), full)


def test_teacher_topk_equals_full_reduction(inputs) -> None:
    x = inputs
    full = reduce_logits(x["t_hidden_base"] @ x["t_weight"].T, x["sampled"], K)
    chunked = teacher_topk(x["t_hidden_base"], x["t_weight"], x["sampled"], K, chunk_size=4)
    assert torch.equal(full.topk_ids, chunked.topk_ids)
    torch.testing.assert_close(full.topk_logprobs, chunked.topk_logprobs, atol=1e-12, rtol=0)
    torch.testing.assert_close(full.sampled_logprob, chunked.sampled_logprob, atol=1e-12, rtol=0)
    logp = torch.log_softmax(x["t_hidden_base"] @ x["t_weight"].T, -1)
    torch.testing.assert_close(
        chunked.sampled_logprob, logp.gather(-1, x["sampled"][:, None])[:, 0]
    )


def test_adopted_target_eq10_fallbacks(inputs) -> None:
    x = inputs
    base = teacher_topk(x["t_hidden_base"], x["t_weight"], x["sampled"], K)
    refl = teacher_topk(x["t_hidden_refl"], x["t_weight"], x["sampled"], K)
    assert adopted_target(base, None).scores is base
    misaligned = adopted_target(base, refl, aligned=False)
    assert misaligned.scores is base and not misaligned.reflected
    assert misaligned.fallback == "misaligned" and misaligned.impact is None
    ok = adopted_target(base, refl)
    assert ok.scores is refl and ok.reflected and ok.fallback is None
    refl.sampled_logprob[3] = float("nan")
    broken = adopted_target(base, refl)  # impact fails: keep q^R, drop grouping
    assert broken.scores is refl and broken.reflected and broken.impact is None


def test_token_impact_is_detached_and_masked() -> None:
    a = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    b = torch.tensor([-1.5, -1.0, -0.5])
    s = token_impact(a, b, mask=torch.tensor([1, 0, 1]))
    assert not s.requires_grad
    assert s.tolist() == [0.5, 0.0, 0.0]


def test_batch_loss_is_mean_over_trajectories() -> None:
    assert batch_loss([torch.tensor(1.0), torch.tensor(3.0)]).item() == 2.0
    assert batch_loss([]).item() == 0.0
    with pytest.raises(ValueError, match="same supervised positions"):
        trajectory_loss(torch.ones(3), torch.ones(4))


def _logits(probs: list[float]) -> torch.Tensor:
    return torch.tensor([probs], dtype=torch.float64).log()


def test_reverse_kl_penalises_student_mass_where_the_teacher_has_none() -> None:
    """Eq. 8 is KL(student || teacher): a student spreading mass onto a token the teacher rules
    out (p = 0.2 where q = 1e-6) costs more than a student missing a token the teacher keeps
    (p = 1e-6 where q = 0.2). A forward KL would rank them the other way round."""
    covering, seeking = [0.4, 0.4, 0.2], [0.5, 0.5 - 1e-6, 1e-6]
    teacher_a, teacher_b = [0.5, 0.5 - 1e-6, 1e-6], [0.4, 0.4, 0.2]
    extra = topk_reverse_kl(_logits(covering), _logits(teacher_a))
    missing = topk_reverse_kl(_logits(seeking), _logits(teacher_b))
    # by hand: sum_v p(v) ln(p(v) / q(v)) over the three tokens, float64
    by_hand = [
        0.4 * math.log(0.4 / 0.5) + 0.4 * math.log(0.4 / (0.5 - 1e-6)) + 0.2 * math.log(0.2 / 1e-6),
        0.5 * math.log(0.5 / 0.4)
        + (0.5 - 1e-6) * math.log((0.5 - 1e-6) / 0.4)
        + 1e-6 * math.log(1e-6 / 0.2),
    ]
    assert extra.item() == pytest.approx(by_hand[0], abs=1e-9)  # 2.2627
    assert missing.item() == pytest.approx(by_hand[1], abs=1e-9)  # 0.2231
    assert extra.item() > 10 * missing.item()


def test_reverse_kl_is_zero_only_at_the_teacher_and_renormalises_on_the_support() -> None:
    teacher = _logits([0.6, 0.3, 0.1])
    assert topk_reverse_kl(teacher.clone(), teacher).item() == pytest.approx(0.0, abs=1e-12)
    # a constant shift of either side's logits is the same distribution on the support
    assert topk_reverse_kl(teacher + 3.0, teacher - 7.0).item() == pytest.approx(0.0, abs=1e-12)
    other = _logits([0.3, 0.6, 0.1])
    assert topk_reverse_kl(other, teacher).item() > 0
    student = other.clone().requires_grad_(True)
    topk_reverse_kl(student, teacher).sum().backward()
    step = student.detach() - 0.5 * student.grad  # descent moves p towards the teacher
    assert topk_reverse_kl(step, teacher).item() < topk_reverse_kl(other, teacher).item()
