"""Lemma 1 (Eq. 6): the gradient change from q^0 to q^R on a shared support, float64 autograd."""

from __future__ import annotations

import torch

from beacon.train.opd.revue_loss import topk_reverse_kl

V, K, H = 50, 8, 6


def kl_on_support(student_logits: torch.Tensor, teacher_logp: torch.Tensor, support: torch.Tensor):
    return topk_reverse_kl(student_logits[support].unsqueeze(0), teacher_logp[support].unsqueeze(0))


def test_lemma1_parameter_gradient_identity() -> None:
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        theta = torch.randn(V, H, dtype=torch.float64, generator=gen, requires_grad=True)
        h = torch.randn(H, dtype=torch.float64, generator=gen)
        log_q0 = torch.log_softmax(2 * torch.randn(V, dtype=torch.float64, generator=gen), -1)
        log_qr = torch.log_softmax(2 * torch.randn(V, dtype=torch.float64, generator=gen), -1)
        support = torch.topk(log_qr, K).indices  # Supp = TopK(q^R), shared by both teachers
        logits = theta @ h

        diff = kl_on_support(logits, log_qr, support) - kl_on_support(logits, log_q0, support)
        (lhs,) = torch.autograd.grad(diff.sum(), theta, retain_graph=True)

        # RHS: -E_{v ~ p^Supp}[ d(v) grad log p^Supp(v) ], d from full-vocabulary log-probs
        log_p_supp = torch.log_softmax(logits[support], -1)
        d = (log_qr - log_q0)[support]
        rhs = torch.zeros_like(theta)
        for k in range(K):
            (g,) = torch.autograd.grad(log_p_supp[k], theta, retain_graph=True)
            rhs -= log_p_supp[k].exp().detach() * d[k] * g
        torch.testing.assert_close(lhs, rhs, atol=1e-10, rtol=0)


def test_lemma1_logit_form_eq17() -> None:
    # d/dz_v [l(p, q^R) - l(p, q^0)] = -p^S(v) (d(v) - mean_{p^S} d), zero off the support
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(V, dtype=torch.float64, generator=gen, requires_grad=True)
    log_q0 = torch.log_softmax(torch.randn(V, dtype=torch.float64, generator=gen), -1)
    log_qr = torch.log_softmax(torch.randn(V, dtype=torch.float64, generator=gen), -1)
    support = torch.topk(log_qr, K).indices
    diff = kl_on_support(logits, log_qr, support) - kl_on_support(logits, log_q0, support)
    (grad,) = torch.autograd.grad(diff.sum(), logits)
    p_s = torch.softmax(logits.detach()[support], -1)
    d = (log_qr - log_q0)[support]
    expected = torch.zeros(V, dtype=torch.float64)
    expected[support] = -p_s * (d - (p_s * d).sum())
    torch.testing.assert_close(grad, expected, atol=1e-12, rtol=0)


def test_uniform_shift_cancels_under_support_normalisation() -> None:
    # Appendix D.1's example: both teachers renormalise to (0.4, 0.6) on the top-2 of q^R, so the
    # gradient difference is zero although either token's impact is log 3
    log_q0 = torch.tensor([0.10, 0.15, 0.375, 0.375], dtype=torch.float64).log()
    log_qr = torch.tensor([0.30, 0.45, 0.125, 0.125], dtype=torch.float64).log()
    support = torch.topk(log_qr, 2).indices
    logits = torch.randn(4, dtype=torch.float64, requires_grad=True)
    diff = kl_on_support(logits, log_qr, support) - kl_on_support(logits, log_q0, support)
    (grad,) = torch.autograd.grad(diff.sum(), logits)
    assert torch.allclose(grad, torch.zeros(4, dtype=torch.float64), atol=1e-15)
    assert torch.allclose((log_qr - log_q0)[support].abs(), torch.tensor(3.0).log().double())
