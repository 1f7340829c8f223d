"""One group through every component: verify, states, critic (fake), assemble, condition, loss."""

from __future__ import annotations

import asyncio
import json

import torch
from PIL import Image

from beacon.train.opd.assemble import (
    check_and_assemble,
    coverage_counts,
    impact_sparsity,
    slot_statuses,
)
from beacon.train.opd.critic import ask_critic, build_critic_request
from beacon.train.opd.critic_schema import group_kind, observed_states
from beacon.train.opd.revue_loss import (
    adopted_target,
    batch_loss,
    grouped_weights,
    support_logits,
    teacher_topk,
    topk_reverse_kl,
    trajectory_loss,
)
from beacon.train.opd.score import condition_messages, reflection_text
from beacon.types import Sample

from .helpers import labels, make_trajectory

V, H, K = 64, 8, 4


def test_group_to_batch_loss() -> None:
    sample = Sample(id="s1", images=[], question="Which?", answer="A", answer_type="text")
    group = [make_trajectory([["k1"]]), make_trajectory([["k2"]], answer="B"), make_trajectory([])]
    correct = labels(group, sample)
    assert correct == [True, False, True] and group_kind(correct) == "mixed"
    states = observed_states(group)
    request = build_critic_request(
        sample.question,
        sample.answer,
        group,
        correct,
        states,
        lambda k: Image.new("RGB", (2, 2)),
    )
    reply_json = {
        "applicable": True,
        "sufficient_states": [{"state_id": "R1_S1", "support_image_ids": ["R1_S1_IMG1"]}],
        "reading": {"query_slot": "s", "observed_value": "v", "visual_fact": "f"},
        "grounding": {"rule": "r"},
        "rollout_diagnoses": [
            {"rollout_id": "R1", "stage": "CORRECT", "discrepancy": ""},
            {"rollout_id": "R2", "stage": "READ", "discrepancy": "cropped the wrong sign"},
            {"rollout_id": "R3", "stage": "CORRECT", "discrepancy": ""},
        ],
    }

    async def send(_request):
        return json.dumps(reply_json)

    reply = asyncio.run(ask_critic(request, send))
    assembly = check_and_assemble(reply.output, states, correct, request.shown_image_ids)
    assert assembly.status == "complete" and assembly.reconciled == 1  # R2: READ -> ACQUIRE
    assert assembly.reflections[1].break_point.stage == "ACQUIRE"
    assert assembly.reflections[1].anchor.state.state_id == "R1_S1"  # from C+ (R2 owns none)

    gen = torch.Generator().manual_seed(0)
    w_teacher = torch.randn(V, H, generator=gen, dtype=torch.float64)
    w_student = torch.randn(V, H, generator=gen, dtype=torch.float64, requires_grad=True)
    losses, impacts = [], []
    for i, trajectory in enumerate(group):
        positions = sum(trajectory.loss_mask)
        sampled = torch.randint(0, V, (positions,), generator=gen)
        h0 = torch.randn(positions, H, generator=gen, dtype=torch.float64)
        base = teacher_topk(h0, w_teacher, sampled, K)
        reflection = assembly.reflections[i]
        messages = condition_messages(
            [{"role": "user", "content": "Q"}], reflection_text(reflection)
        )
        assert "Break point" in messages[0]["content"][-1]["text"]
        refl = teacher_topk(h0 + 0.3, w_teacher, sampled, K)
        target = adopted_target(base, refl, aligned=i != 2)  # R3's re-encoding mismatched
        if target.impact is not None:
            impacts.append(target.impact)
        hidden = torch.randn(positions, H, generator=gen, dtype=torch.float64)
        z = support_logits(hidden, w_student, target.scores.topk_ids)
        kl = topk_reverse_kl(z, target.scores.topk_logprobs)
        weights = grouped_weights(target.impact, num_positions=positions)
        losses.append(trajectory_loss(kl, weights))
    loss = batch_loss(losses)
    loss.backward()
    assert torch.isfinite(loss) and w_student.grad is not None
    statuses = slot_statuses(assembly, aligned=[True, True, False])
    assert coverage_counts(statuses)["misaligned"] == 1
    assert 0.2 <= impact_sparsity(impacts) <= 1.0
