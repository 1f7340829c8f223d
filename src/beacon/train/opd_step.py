"""One OPD step (Algorithm 1): rollouts -> verify -> states -> critic (background) -> base teacher
-> assemble -> conditioned teacher -> target, weights, loss -> backward.

Every formula is a `beacon.revue` component; this module only orders the work and counts what
fell back. The critic requests of all groups are submitted before the base teacher runs, so the
critic's latency overlaps the teacher's scoring. Gradients are accumulated per trajectory with
weight 1/N (N = retained trajectories), so the step's gradient is that of `batch_loss` while
only one trajectory's graph is alive at a time.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from beacon.agent.episode import EpisodeSpec
from beacon.revue import (
    WEIGHTINGS,
    AdoptedTarget,
    Assembly,
    TeacherScores,
    adopted_target,
    batch_loss,
    build_critic_request,
    check_and_assemble,
    coverage_counts,
    impact_sparsity,
    observed_states,
    reflection_text,
    slot_statuses,
    stage_counts,
    topk_reverse_kl,
    trajectory_loss,
    verify_group,
)
from beacon.train.encode import EncodedTrajectory, encode_trajectory
from beacon.train.opd_score import SequenceScorer, conditioned_sequence
from beacon.types import Sample, Trajectory

if TYPE_CHECKING:
    from beacon.train.opd_config import OPDConfig

logger = logging.getLogger(__name__)

REVUE_LOG = "revue.jsonl"
TeacherContext = tuple[str, tuple[str, ...]] | None
"""(text, support image keys) to condition the teacher on, or None for the base teacher."""
_SEED_STRIDE = 1_000_003


@dataclass
class OPDParts:
    """What a step needs besides the optimizer: models, rollout loop, critic, item pool."""

    cfg: OPDConfig
    samples: list[Sample]
    agent: Any  # beacon.agent.AgentLoop
    store: Any  # beacon.images.ImageStore
    tokenizer: Any
    student: SequenceScorer
    teacher: SequenceScorer
    critic: Any  # beacon.train.opd_critic.CriticRunner | None
    run_dir: Path


@dataclass
class Group:
    """One item's M trajectories and what ReVuE derived for them."""

    sample: Sample
    trajectories: list[Trajectory]
    encoded: list[EncodedTrajectory]
    labels: list[bool]
    assembly: Assembly | None = None
    future: Any = None  # Future[CriticReply]
    states: Any = None  # ObservedStates
    shown: frozenset[str] = frozenset()
    critic_attempts: int = 0
    aligned: list[bool] = field(default_factory=list)


def episode_seed(seed: int, step: int, item: int, k: int) -> int:
    """Sampling seed of rollout k of item slot `item` at `step`: a resumed step samples alike."""
    return (seed * _SEED_STRIDE + step * 4099 + item * 97 + k) % (2**31)


def rollouts(parts: OPDParts, samples: list[Sample], step: int) -> list[Group]:
    """M student trajectories per item through the agent loop, verified per group (Alg. 2)."""
    m = parts.cfg.rollout.group_size
    specs = [
        EpisodeSpec(s, "tool", k=k, seed=episode_seed(parts.cfg.train.seed, step, i, k))
        for i, s in enumerate(samples)
        for k in range(m)
    ]
    trajectories = parts.agent.run(specs)
    groups = []
    for i, sample in enumerate(samples):
        group = trajectories[i * m : (i + 1) * m]
        encoded = [encode_trajectory(t, parts.tokenizer) for t in group]
        groups.append(Group(sample, group, encoded, verify_group(group, sample).labels))
    return groups


def submit_critic(parts: OPDParts, groups: list[Group], step: int) -> None:
    """One critic request per group (Algorithm 1, line 5), answered in the background."""
    for g, group in enumerate(groups):
        states = observed_states(group.trajectories)
        request = build_critic_request(
            group.sample.question,
            group.sample.answer,
            group.trajectories,
            group.labels,
            states,
            parts.store.get,
            max_tool_images=parts.cfg.revue.critic_max_tool_images,
            max_tokens=parts.cfg.revue.critic_max_tokens,
        )
        group.states, group.shown = states, request.shown_image_ids
        group.future = parts.critic.submit(request, step=step, group=g)


def collect_critic(groups: list[Group]) -> None:
    """Wait for the replies and run CheckAndAssemble (Algorithm 4) on each."""
    for group in groups:
        reply = group.future.result()
        group.critic_attempts = reply.attempts
        group.assembly = check_and_assemble(reply.output, group.states, group.labels, group.shown)
        if group.assembly.problems:
            logger.warning("critic output rejected: %s", "; ".join(group.assembly.problems))


def no_context(parts: OPDParts, group: Group, i: int) -> TeacherContext:
    """Vanilla OPD: the teacher sees what the student saw."""
    return None


def gt_context(parts: OPDParts, group: Group, i: int) -> TeacherContext:
    """GT-privileged teacher: the reference answer appended to the first user message."""
    return f"Reference answer (training-time guidance): {group.sample.answer}", ()


def reflection_context(parts: OPDParts, group: Group, i: int) -> TeacherContext:
    """ReVuE: the assembled reflection R_i and its anchor's support images, when R_i exists."""
    reflection = group.assembly.reflections[i] if group.assembly is not None else None
    if reflection is None:
        return None
    keys = reflection.anchor.support_image_keys if reflection.anchor else ()
    return reflection_text(reflection), keys


TEACHER_CONTEXTS: dict[str, Callable[[OPDParts, Group, int], TeacherContext]] = {
    "base": no_context,
    "gt": gt_context,
    "reflection": reflection_context,
}
"""What the teacher is conditioned on, by config name (`teacher.context`)."""


def target_for(parts: OPDParts, group: Group, i: int, base: TeacherScores) -> AdoptedTarget:
    """q* of trajectory i (Eq. 10): conditioned teacher when it exists and aligns, else q^0."""
    context = TEACHER_CONTEXTS[parts.cfg.teacher.context](parts, group, i)
    if context is None:
        return adopted_target(base, None)
    cond = conditioned_sequence(
        group.trajectories[i],
        group.encoded[i],
        group.sample,
        context[0],
        context[1],
        parts.tokenizer,
        parts.store.get,
        parts.cfg.teacher.reencode_check,
    )
    group.aligned[i] = cond.alignment.aligned
    if cond.encoded is None:
        return AdoptedTarget(base, reflected=False, impact=None, fallback="misaligned")
    revue = parts.cfg.revue
    reflect = parts.teacher.teacher_scores(cond.encoded, revue.k_support, revue.chunk_size)
    return adopted_target(base, reflect, aligned=True)


def opd_step(parts: OPDParts, samples: list[Sample], step: int) -> dict[str, Any]:
    """Rollouts, targets and backward of one step; returns its ReVuE metrics (`loss` included)."""
    cfg = parts.cfg.revue
    groups = rollouts(parts, samples, step)
    uses_critic = parts.cfg.teacher.context == "reflection"
    if uses_critic:
        submit_critic(parts, groups, step)
    base = [
        [parts.teacher.teacher_scores(e, cfg.k_support, cfg.chunk_size) for e in g.encoded]
        for g in groups
    ]
    if uses_critic:
        collect_critic(groups)
    generator = torch.Generator().manual_seed(episode_seed(parts.cfg.train.seed, step, 0, 0))
    retained = sum(1 for g in groups for e in g.encoded if e.num_loss_tokens > 0)
    records, losses, impacts = [], [], []
    for g, group in enumerate(groups):
        group.aligned = [True] * len(group.trajectories)
        for i, encoded in enumerate(group.encoded):
            if encoded.num_loss_tokens == 0:  # an episode that failed before generating
                continue
            target = target_for(parts, group, i, base[g][i])
            positions = target.scores.num_positions
            w = WEIGHTINGS[cfg.weighting](target.impact, positions, cfg.alpha, cfg.lam, generator)
            z = parts.student.support_logits(encoded, target.scores.topk_ids, cfg.chunk_size)
            kl = topk_reverse_kl(z, target.scores.topk_logprobs.to(z.device))
            loss = trajectory_loss(kl, w.weights.to(kl.device))
            (loss / retained).backward()
            loss = loss.detach()
            losses.append(loss)
            if target.impact is not None:
                impacts.append(target.impact)
            records.append(_record(step, g, i, target, w.fallback, loss, group))
    _append_records(parts.run_dir / REVUE_LOG, records)
    return _metrics(groups, records, losses, impacts, uses_critic)


def _record(
    step: int,
    g: int,
    i: int,
    target: AdoptedTarget,
    weight_fallback: str | None,
    loss: Any,
    group: Group,
) -> dict[str, Any]:
    impact = None if target.impact is None else [round(float(x), 6) for x in target.impact]
    return {
        "step": step,
        "group": g,
        "slot": i,
        "correct": group.labels[i],
        "reflected": target.reflected,
        "target_fallback": target.fallback,
        "weight_fallback": weight_fallback,
        "positions": target.scores.num_positions,
        "loss": float(loss),
        "impact": impact,
    }


def _append_records(path: Path, records: list[dict[str, Any]]) -> None:
    with path.open("a", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


def _metrics(
    groups: list[Group],
    records: list[dict[str, Any]],
    losses: list[Any],
    impacts: list[Any],
    uses_critic: bool,
) -> dict[str, Any]:
    trajectories = [t for g in groups for t in g.trajectories]
    generated = [
        sum(len(s.token_ids) for s in t.segments if s.role == "generated") for t in trajectories
    ]
    out: dict[str, Any] = {
        "loss": float(batch_loss(losses)) if losses else 0.0,
        "retained": len(losses),
        "tokens": sum(len(e) for g in groups for e in g.encoded),
        "tokens_computed": sum(len(e) for g in groups for e in g.encoded if e.num_loss_tokens > 0),
        "loss_tokens": sum(r["positions"] for r in records),
        "accuracy": sum(sum(g.labels) for g in groups) / max(len(trajectories), 1),
        "tool_call_rate": sum(bool(t.tool_calls) for t in trajectories) / len(trajectories),
        "tool_calls_mean": sum(len(t.tool_calls) for t in trajectories) / len(trajectories),
        "rollout_tokens_mean": sum(generated) / len(generated),
        "impact_sparsity": impact_sparsity(impacts),
        "loss_per_group": [
            sum(r["loss"] for r in records if r["group"] == g)
            / max(1, sum(1 for r in records if r["group"] == g))
            for g in range(len(groups))
        ],
    }
    for name, count in Counter(r["target_fallback"] or "reflected" for r in records).items():
        out[f"target_{name}"] = count
    for name, count in Counter(r["weight_fallback"] or "grouped" for r in records).items():
        out[f"weights_{name}"] = count
    if uses_critic:
        statuses = [s for g in groups for s in slot_statuses(g.assembly, g.aligned)]
        out.update({f"coverage_{k}": v for k, v in coverage_counts(statuses).items()})
        out.update({f"stage_{k}": v for k, v in stage_counts(g.assembly for g in groups).items()})
        out["critic_attempts"] = sum(g.critic_attempts for g in groups)
        out["critic_groups_missing"] = sum(g.assembly.status == "missing" for g in groups)
    return out
