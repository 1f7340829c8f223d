"""One OPD step (Algorithm 1): rollouts -> verdicts -> states -> critic (background) -> base
teacher -> assemble -> conditioned teacher -> target, weights, loss -> backward.

Every formula is a `beacon.train.opd` component; this module orders the work and counts what fell
back. Rollouts come from `beacon.rollout.Rollouts`, as GRPO's do, so the labels c_i are the
benchmark's verdicts (docs/revue.md, "Correctness labels"). Critic requests are submitted
before the base teacher runs, so their latency overlaps its scoring. Each trajectory's loss is
backpropagated with weight 1/N (N = retained trajectories over all processes): the gradient of
`batch_loss` with one trajectory's graph alive at a time.

On several processes each rolls out its share of the step's items. The student is scored
through the model `accelerator.prepare` returned (`score.SequenceScorer`), one trajectory per
micro-batch as every trainer runs them (`loop.accumulate`, `loop.backward`: a process with
fewer trajectories runs a placeholder of weight 0, the launch averages the gradients), and the
records of all processes are gathered for the metrics.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from beacon.jsonl import JsonlWriter
from beacon.rollout import Group, Rollouts, episode_seed
from beacon.runfolder import REVUE_LOG
from beacon.train.core import train_loop as loop
from beacon.train.core.checkpoint import TrainState
from beacon.train.core.encode import EncodedTrajectory, encode_trajectory
from beacon.train.core.health import group_health
from beacon.train.core.outcomes import group_outcomes, item_label
from beacon.train.core.setup import WeightSync
from beacon.train.opd.assemble import (
    Assembly,
    check_and_assemble,
    coverage_counts,
    impact_sparsity,
    slot_statuses,
)
from beacon.train.opd.critic import build_critic_request
from beacon.train.opd.critic_schema import observed_states
from beacon.train.opd.revue_loss import (
    WEIGHTINGS,
    AdoptedTarget,
    TeacherScores,
    adopted_target,
    batch_loss,
    high_count,
    impact_order,
    topk_reverse_kl,
    trajectory_loss,
)
from beacon.train.opd.score import (
    SequenceScorer,
    conditioned_sequence,
    first_divergence,
    health_metrics,
    reflection_text,
    supervised_positions,
    trajectory_health,
)
from beacon.train.opd.shuffled import (
    Assignment,
    Donor,
    GroupReflections,
    read_pool,
    shuffled_assignment,
    step_donors,
    write_pool,
)
from beacon.types import Sample

if TYPE_CHECKING:
    from concurrent.futures import Future

    from beacon.engines.tokenizer import HFTokenizer
    from beacon.images import ImageStore
    from beacon.train.opd.config import OPDConfig
    from beacon.train.opd.critic import CriticReply, CriticRunner
    from beacon.train.opd.critic_schema import ObservedStates
    from beacon.train.opd.teacher_server import RemoteTeacher

logger = logging.getLogger(__name__)

TeacherContext = tuple[str, tuple[str, ...]] | None
"""(text, support image keys) to condition the teacher on, or None for the base teacher."""
STAGES = ("CORRECT", "ACQUIRE", "READ", "GROUND", "OTHER")


@dataclass
class OPDParts:
    """What a step needs: the student and its optimisation, rollouts, teacher, critic, items."""

    cfg: OPDConfig
    policy: loop.LoopParts
    samples: list[Sample]
    rollouts: Rollouts
    store: ImageStore
    tokenizer: HFTokenizer
    student: SequenceScorer
    teacher: SequenceScorer | RemoteTeacher
    critic: CriticRunner | None
    run_dir: Path
    weight_sync: WeightSync


@dataclass
class Distilled:
    """One item's rollout group (`slot`: its place in the step) and what ReVuE derived for it."""

    group: Group
    slot: int
    encoded: list[EncodedTrajectory]
    assembly: Assembly | None = None
    future: Future[CriticReply] | None = None
    states: ObservedStates | None = None
    shown: frozenset[str] = frozenset()
    critic_attempts: int = 0
    aligned: list[bool] = field(default_factory=list)
    borrowed: list[Donor | None] | None = None
    """`revue.reflection_source: shuffled`: the reflection each rollout gets instead of its own
    (`beacon.train.opd.shuffled`); None: its own."""

    @property
    def labels(self) -> list[bool]:
        return self.group.correct


def collect(parts: OPDParts, samples: Sequence[Sample], slots: Sequence[int], step: int | str):
    """The student's M trajectories per item (`slots[j]` is item j's place in the step),
    scored by the benchmark (Alg. 2) and encoded token for token; and the rollout stats."""
    groups, stats = parts.rollouts.groups(samples, step)
    out = [
        Distilled(g, slots[g.item], [encode_trajectory(t, parts.tokenizer) for t in g.trajectories])
        for g in groups
    ]
    for d in out:
        d.aligned = [True] * len(d.encoded)
    return out, stats


def submit_critic(parts: OPDParts, distilled: list[Distilled], step: int) -> None:
    """One critic request per group (Algorithm 1, line 5), answered in the background; its
    exchange is logged in critic.jsonl under `step`."""
    for d in distilled:
        group = d.group
        states = observed_states(group.trajectories)
        request = build_critic_request(
            group.sample.question,
            group.sample.answer,
            group.trajectories,
            d.labels,
            states,
            parts.store.get,
            max_tool_images=parts.cfg.revue.critic_max_tool_images,
            max_tokens=parts.cfg.revue.critic_max_tokens,
        )
        d.states, d.shown = states, request.shown_image_ids
        d.future = parts.critic.submit(request, step=step, group=d.slot)


def collect_critic(distilled: list[Distilled]) -> None:
    """Wait for the replies and run CheckAndAssemble (Algorithm 4) on each."""
    for d in distilled:
        reply = d.future.result()
        d.critic_attempts = reply.attempts
        d.assembly = check_and_assemble(reply.output, d.states, d.labels, d.shown)
        if d.assembly.problems:
            logger.warning("critic output rejected: %s", "; ".join(d.assembly.problems))


def borrow_reflections(
    parts: OPDParts, distilled: list[Distilled], step: int | str, keep: bool = True
) -> Assignment:
    """The shuffled control: give each rollout another item's reflection (`d.borrowed`), drawn
    over the groups of every process; with `keep`, read the earlier steps' donors from the run
    folder and keep this step's for the next (`beacon.train.opd.shuffled`)."""
    acc = parts.policy.accelerator
    local = [
        GroupReflections.of(d.slot, d.group.sample, d.assembly.reflections)
        for d in distilled
        if d.assembly is not None
    ]
    groups = [g for rank in loop.gather_per_rank(acc, local) for g in rank]
    previous = read_pool(parts.run_dir, step) if keep and isinstance(step, int) else []
    assignment = shuffled_assignment(groups, previous, parts.cfg.train.seed, step)
    for d in distilled:
        d.borrowed = assignment.donors.get(d.slot, [None] * len(d.encoded))
    if keep and isinstance(step, int) and acc.is_main_process:
        write_pool(parts.run_dir, step, step_donors(groups, step))
    return assignment


def no_context(parts: OPDParts, d: Distilled, i: int) -> TeacherContext:
    """Vanilla OPD: the teacher sees what the student saw."""
    return None


def gt_context(parts: OPDParts, d: Distilled, i: int) -> TeacherContext:
    """GT-privileged teacher: the reference answer appended to the first user message."""
    return f"Reference answer (training-time guidance): {d.group.sample.answer}", ()


def reflection_context(parts: OPDParts, d: Distilled, i: int) -> TeacherContext:
    """ReVuE: the assembled reflection R_i and its anchor's support images, when R_i exists;
    in the shuffled control, the other item's reflection and images borrowed in its place."""
    if d.borrowed is not None:
        donor = d.borrowed[i]
        return None if donor is None else (donor.text, donor.keys)
    reflection = d.assembly.reflections[i] if d.assembly is not None else None
    if reflection is None:
        return None
    keys = reflection.anchor.support_image_keys if reflection.anchor else ()
    return reflection_text(reflection), keys


TEACHER_CONTEXTS: dict[str, Callable[[OPDParts, Distilled, int], TeacherContext]] = {
    "base": no_context,
    "gt": gt_context,
    "reflection": reflection_context,
}
"""What the teacher is conditioned on, by config name (`teacher.context`)."""


def conditioned_scores(parts: OPDParts, d: Distilled, i: int) -> TeacherScores | None:
    """The conditioned teacher's scores of trajectory i, or None (no context, or misaligned:
    then `d.aligned[i]` is False)."""
    context = TEACHER_CONTEXTS[parts.cfg.teacher.context](parts, d, i)
    if context is None:
        return None
    cond = conditioned_sequence(
        d.group.trajectories[i],
        d.encoded[i],
        d.group.sample,
        context[0],
        context[1],
        parts.tokenizer,
        parts.store.get,
        parts.cfg.teacher.reencode_check,
        parts.cfg.teacher.position,
    )
    d.aligned[i] = cond.alignment.aligned
    if cond.encoded is None:
        return None
    revue = parts.cfg.revue
    return parts.teacher.teacher_scores(cond.encoded, revue.k_support, revue.chunk_size)


def target_for(parts: OPDParts, d: Distilled, i: int, base: TeacherScores) -> AdoptedTarget:
    """q* of trajectory i (Eq. 10): conditioned teacher when it exists and aligns, else q^0."""
    reflect = conditioned_scores(parts, d, i)
    if reflect is None and not d.aligned[i]:
        return AdoptedTarget(base, reflected=False, impact=None, fallback="misaligned")
    return adopted_target(base, reflect, aligned=True)


def base_scores(parts: OPDParts, distilled: list[Distilled]) -> list[list[TeacherScores]]:
    """q^0 on every trajectory: the teacher on the student's exact ids and prompt."""
    revue = parts.cfg.revue
    return [
        [parts.teacher.teacher_scores(e, revue.k_support, revue.chunk_size) for e in d.encoded]
        for d in distilled
    ]


def opd_step(parts: OPDParts, state: TrainState) -> loop.StepOutput:
    """Rollouts, targets and backward of one step, with its ReVuE metrics."""
    cfg, acc = parts.cfg, parts.policy.accelerator
    take, step = cfg.rollout.items_per_step, state.step + 1
    indices = loop.step_indices(state.samples_seen, take, len(parts.samples), cfg.train.seed)
    slots = loop.my_share(range(take), acc)
    distilled, stats = collect(parts, [parts.samples[indices[s]] for s in slots], slots, step)
    uses_critic = cfg.teacher.context == "reflection"
    shuffled = uses_critic and cfg.revue.reflection_source == "shuffled"
    if uses_critic:
        submit_critic(parts, distilled, step)
    base = base_scores(parts, distilled)
    if uses_critic:
        collect_critic(distilled)
    assignment = borrow_reflections(parts, distilled, step) if shuffled else None
    work = [  # an episode that generated nothing it can learn is left out
        (g, i)
        for g, d in enumerate(distilled)
        for i, e in enumerate(d.encoded)
        if e.num_loss_tokens > 0
    ]
    retained = max(1, int(acc.reduce(torch.tensor([len(work)], device=acc.device), "sum")[0]))
    records = []
    for n in loop.accumulate(acc, parts.policy.model, len(work)):
        if n < len(work):
            g, i = work[n]
            loss, record = _trajectory(parts, distilled[g], i, base[g][i], step)
            records.append(record)
        else:
            loss = _placeholder_loss(parts, distilled)
        loop.backward(acc, loss / retained)
    records = [r for rank in loop.gather_per_rank(acc, records) for r in rank]
    local_groups = [_group_record(d, uses_critic) for d in distilled]
    groups = [g for rank in loop.gather_per_rank(acc, local_groups) for g in rank]
    failed = acc.reduce(torch.tensor([sum(stats.failed.values())], device=acc.device), "sum")
    if acc.is_main_process:
        _append(parts.run_dir / REVUE_LOG, sorted(records, key=lambda r: (r["group"], r["slot"])))
    metrics = step_metrics(records, groups, uses_critic)
    if uses_critic:
        metrics["revue/shuffled"] = int(shuffled)
    if assignment is not None:
        metrics["revue/shuffled_none"] = assignment.none
        metrics["revue/shuffled_previous"] = assignment.previous
    metrics.update(loop.rollout_drops(acc, stats))
    metrics["rollout/failed"] = int(failed[0])
    loss = metrics.pop("loss")
    return loop.StepOutput(
        loss=loss,
        tokens=metrics.pop("tokens"),
        padded_tokens=metrics.pop("tokens_computed"),
        loss_tokens=sum(r["positions"] for r in records),
        sequences=len(records),
        microbatches=len(records),
        samples=take,
        extra=metrics,
        update=cfg.min_loss == 0 or loss >= cfg.min_loss,
    )


def _trajectory(
    parts: OPDParts, d: Distilled, i: int, base: TeacherScores, step: int
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Trajectory i's loss ℓ_i (Eq. 8-9, graph attached) and its revue.jsonl record."""
    cfg = parts.cfg.revue
    target = target_for(parts, d, i, base)
    positions = target.scores.num_positions
    seed = episode_seed(parts.cfg.train.seed, f"{step}/weights/{d.slot}/{i}")
    generator = torch.Generator().manual_seed(seed)
    w = WEIGHTINGS[cfg.weighting](target.impact, positions, cfg.alpha, cfg.lam, generator)
    student = parts.student.student_scores(d.encoded[i], target.scores.topk_ids, cfg.chunk_size)
    z = student.support_logits
    kl = topk_reverse_kl(z, target.scores.topk_logprobs.to(z.device))
    loss = trajectory_loss(kl, w.weights.to(kl.device))
    impact = None if target.impact is None else [round(float(x), 6) for x in target.impact]
    high_share = uniform_high_share(kl.detach().cpu(), target.impact, cfg.alpha)
    record = {
        "step": step,
        "group": d.slot,
        "slot": i,
        "correct": d.labels[i],
        "reflected": target.reflected,
        "target_fallback": target.fallback,
        "weight_fallback": w.fallback,
        "positions": positions,
        "loss": float(loss.detach()),
        "impact": impact,
        "tokens": len(d.encoded[i]),
        "uniform_high": high_share,
        "decisive_impact": decisive_impact(d, i, target.impact),
        "health": trajectory_health(d.group.trajectories[i], d.encoded[i], student, base),
    }
    return loss, record


def uniform_high_share(
    kl: torch.Tensor, impact: torch.Tensor | None, alpha: float
) -> tuple[float, float] | None:
    """(sum of the per-token losses at the High positions, sum over all positions), both over
    |T|: the High group's part of the uniform (unweighted) trajectory loss, before any
    reweighting (at a share >= 0.6 the weights have little room to move the gradient). None
    without usable impacts (no reflection, |T| < 2, all zero or not finite)."""
    n = int(kl.numel())
    usable = impact is not None and impact.shape == (n,) and n >= 2
    if not usable or not bool(torch.isfinite(impact).all()) or not bool((impact != 0).any()):
        return None
    high = impact_order(impact.cpu())[: high_count(n, alpha)]
    kl = kl.double()
    return float(kl[high].sum() / n), float(kl.sum() / n)


def decisive_impact(d: Distilled, i: int, impact: torch.Tensor | None) -> float | None:
    """Share of trajectory i's total impact at its decisive token: where a wrong rollout first
    leaves its group's first correct one (`score.first_divergence`). None when the rollout is
    correct, has no correct sibling or no impact, or does not diverge at a generated token."""
    if impact is None or d.labels[i]:
        return None
    reference = next((j for j, ok in enumerate(d.labels) if ok), None)
    total = float(impact.sum())
    if reference is None or total <= 0:
        return None
    position = first_divergence(d.encoded[i], d.encoded[reference])
    return None if position is None else float(impact[position]) / total


def _placeholder_loss(parts: OPDParts, distilled: list[Distilled]) -> torch.Tensor:
    """A loss of weight 0 through the student's forward, for a process with fewer trajectories
    to train than another (`loop.accumulate`): on its first trajectory of the step (its images
    keep the vision tower in the graph, as DDP expects of every parameter), or on two text
    tokens when it has none (then DDP needs `train.ddp_find_unused_parameters`)."""
    encoded = next((e for d in distilled for e in d.encoded), None)
    if encoded is None:
        pad = parts.tokenizer.pad_token_id
        encoded = EncodedTrajectory(sample_id="", input_ids=[pad, pad], loss_mask=[0, 1], images=[])
    support = torch.zeros(
        (supervised_positions(encoded).numel(), parts.cfg.revue.k_support), dtype=torch.long
    )
    student = parts.student.student_scores(encoded, support, parts.cfg.revue.chunk_size)
    return student.support_logits.sum() * 0


def _group_record(d: Distilled, uses_critic: bool) -> dict[str, Any]:
    """What a group adds to the metrics besides its trajectories' records."""
    out: dict[str, Any] = {
        "size": len(d.encoded),
        "correct": sum(d.labels),
        "tool_calls": sum(len(t.tool_calls) for t in d.group.trajectories),
        "used_tool": sum(bool(t.tool_calls) for t in d.group.trajectories),
        "generated_tokens": sum(t.response_tokens for t in d.group.trajectories),
        "tokens": sum(len(e) for e in d.encoded),
        "outcomes": group_outcomes(
            d.group.trajectories, d.labels, item_label(d.group.sample.metadata)
        ),
    }
    if uses_critic and d.assembly is not None:
        out["statuses"] = slot_statuses(d.assembly, d.aligned)
        accepted = d.assembly.status in ("complete", "diagnosis_only", "no_reference")
        out["stages"] = [x.stage for x in d.assembly.diagnoses] if accepted else []
        out["critic_attempts"] = d.critic_attempts
        out["missing"] = d.assembly.status == "missing"
    return out


def step_metrics(
    records: list[dict[str, Any]], groups: list[dict[str, Any]], uses_critic: bool
) -> dict[str, Any]:
    """The step's ReVuE metrics from all processes' trajectory and group records."""
    episodes = max(sum(g["size"] for g in groups), 1)
    impacts = [torch.tensor(r["impact"]) for r in records if r["impact"] is not None]
    out: dict[str, Any] = {
        "loss": float(batch_loss([torch.tensor(r["loss"]) for r in records])) if records else 0.0,
        "retained": len(records),
        "tokens": sum(g["tokens"] for g in groups),
        "tokens_computed": sum(r["tokens"] for r in records),
        "accuracy": sum(g["correct"] for g in groups) / episodes,
        "tool_call_rate": sum(g["used_tool"] for g in groups) / episodes,
        "tool_calls_mean": sum(g["tool_calls"] for g in groups) / episodes,
        "rollout_tokens_mean": sum(g["generated_tokens"] for g in groups) / episodes,
        "impact_sparsity": impact_sparsity(impacts),
        **mechanism_metrics(records),
        **group_health([g["outcomes"] for g in groups]),
        **health_metrics(records),
    }
    for name, count in Counter(r["target_fallback"] or "reflected" for r in records).items():
        out[f"target_{name}"] = count
    for name, count in Counter(r["weight_fallback"] or "grouped" for r in records).items():
        out[f"weights_{name}"] = count
    if uses_critic:
        statuses = [s for g in groups for s in g.get("statuses", ())]
        out.update({f"coverage_{k}": v for k, v in coverage_counts(statuses).items()})
        stages = Counter(s for g in groups for s in g.get("stages", ()))
        out.update({f"stage_{s}": stages.get(s, 0) for s in STAGES})
        out["critic_attempts"] = sum(g.get("critic_attempts", 0) for g in groups)
        out["critic_groups_missing"] = sum(bool(g.get("missing")) for g in groups)
    return out


def mechanism_metrics(records: list[dict[str, Any]]) -> dict[str, float | int | None]:
    """`revue/high_share_uniform`: the High group's share of the step's uniform loss (the sum
    over trajectories of their High parts over the sum of their uniform losses; trajectories
    with usable impacts only); `revue/decisive_impact_share`: the mean share of a wrong
    rollout's impact at its decisive token, and `revue/decisive_rollouts` how many had one."""
    shares = [r["uniform_high"] for r in records if r.get("uniform_high") is not None]
    total = sum(s[1] for s in shares)
    decisive = [r["decisive_impact"] for r in records if r.get("decisive_impact") is not None]
    return {
        "revue/high_share_uniform": sum(s[0] for s in shares) / total if total > 0 else None,
        "revue/decisive_impact_share": sum(decisive) / len(decisive) if decisive else None,
        "revue/decisive_rollouts": len(decisive),
    }


def _append(path: Path, records: list[dict[str, Any]]) -> None:
    """One durable append of the step's records, their health sums left out (they are in the
    metrics); a torn last line is cut on resume."""
    if records:
        writer = JsonlWriter(path)
        writer.write(
            "\n".join(json.dumps({k: v for k, v in r.items() if k != "health"}) for r in records)
        )
        writer.close()
