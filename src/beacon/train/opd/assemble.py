"""CheckAndAssemble (Algorithm 4): validate the critic output, reconcile, pick anchors, build R_i.

Order, as in the paper: no output -> no reflections; resolve the sufficient states against the
group (unknown state, unknown / unavailable / not-shown image, empty or duplicate entries are
invalid); mixed groups reconcile stage labels; inapplicable or invalid output -> no reflections;
all-wrong groups -> diagnosis-only reflections (Break Point, no Anchor); otherwise C_i = sufficient
post-tool states owned by trajectory i, C+ = the sufficient original state plus sufficient states
of answer-correct trajectories; C+ empty -> no reflections; else each trajectory's anchor is the
argmin of the lexicographic cost c(e) = (n_tool, n_code, |U_e|, id) over C_i when non-empty, else
over C+ (Eq. 13-14).

Two facts per rollout drive the stage rules. It *owns* a sufficient state when one of its own
post-tool states is sufficient (the paper's ACQUIRE: "no state belonging to this rollout is
sufficient"); it *sees* one when it owns one or the original state is sufficient, since the
original image stays in every rollout's context (Appendix E.2 diagnoses READ and GROUND for
rollouts without tool calls). READ / GROUND need a seen sufficient state; ACQUIRE needs no owned
one (a rollout whose crop missed the target is ACQUIRE even when the original would have done).
Mixed-group reconciliation, which keeps the discrepancy text:
  answer-correct, stage not CORRECT                        -> CORRECT
  answer-wrong, sees no sufficient state, stage not OTHER  -> ACQUIRE
  answer-wrong, owns one, stage ACQUIRE                    -> READ (the first link not known
                                                              to hold)
  answer-wrong, sees one, stage CORRECT                    -> READ
All-correct and all-wrong groups are not reconciled: a conflict there rejects the output.

Stats: Statistics a ReVuE run logs: impact sparsity, reflection coverage, stage counts.

- Impact sparsity (Figure 4, Appendix B.4): the share of total impact carried by the top 20% of
  scored positions, pooled over trajectories (the paper reports 97.6% early in training). We take
  the top ceil(0.2 N) positions by impact rather than the paper's 80th-percentile threshold; the
  two differ only by ties at the threshold.
- Reflection coverage (Table 12): per rollout slot, "complete" (Anchor + Break Point),
  "diagnosis_only", or why the base teacher was used: missing (critic down or unparsable),
  inapplicable, invalid, no_reference (C+ empty), misaligned (re-encoding mismatch).
- Stage counts: the checked diagnoses' stages over groups whose output was accepted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from beacon.train.opd.critic_schema import (
    CriticOutput,
    Diagnosis,
    Grounding,
    ObservedState,
    ObservedStates,
    Reading,
    group_kind,
    rollout_id,
)
from beacon.train.opd.revue_loss import high_count


@dataclass(frozen=True)
class Anchor:
    """A_i: the selected sufficient state, its support U_e, the reading and the grounding rule.

    `support_image_keys` are the ImageStore keys the teacher receives: the support images that
    are not original images (the teacher prompt already holds those).
    """

    state: ObservedState
    support_image_ids: tuple[str, ...]
    support_image_keys: tuple[str, ...]
    reading: Reading
    grounding: Grounding


@dataclass(frozen=True)
class BreakPoint:
    """B_i = (sigma_i, delta_i): the first broken link and the discrepancy."""

    stage: str
    discrepancy: str


@dataclass(frozen=True)
class Reflection:
    """R_i = (A_i, B_i); `anchor` is None for the diagnosis-only reflections of all-wrong groups."""

    anchor: Anchor | None
    break_point: BreakPoint

    @property
    def complete(self) -> bool:
        """True when the reflection has its anchor A_i, not only the diagnosis B_i."""
        return self.anchor is not None


@dataclass
class Assembly:
    """One group's reflections (trajectory order; None = no reflection) and how it went.

    `status` is one of: complete, diagnosis_only, missing, inapplicable, invalid, no_reference.
    """

    reflections: list[Reflection | None]
    status: str
    problems: list[str] = field(default_factory=list)
    diagnoses: list[Diagnosis] = field(default_factory=list)
    reconciled: int = 0


def anchor_cost(state: ObservedState, support: Sequence[str]) -> tuple[int, int, int, int]:
    """c(e) = (n_tool(e), n_code(e), |U_e|, id(e))  (Eq. 13)."""
    return (state.n_tool, state.n_code, len(support), state.index)


def resolve_sufficient(
    output: CriticOutput, states: ObservedStates, shown: frozenset[str]
) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """Sufficient state id -> U_e, and every problem with the ids the critic used."""
    resolved: dict[str, tuple[str, ...]] = {}
    problems = []
    for entry in output.sufficient_states:
        state = states.get(entry.state_id)
        if state is None:
            problems.append(f"unknown state id {entry.state_id!r}")
            continue
        if entry.state_id in resolved:
            problems.append(f"state {entry.state_id!r} listed twice")
        if not entry.support_image_ids:
            problems.append(f"state {entry.state_id!r} has an empty support image set")
        for image_id in entry.support_image_ids:
            if image_id not in state.image_ids:
                problems.append(f"image {image_id!r} is not available at state {entry.state_id!r}")
            elif image_id not in shown:
                problems.append(f"image {image_id!r} was not shown to the critic")
        resolved[entry.state_id] = tuple(dict.fromkeys(entry.support_image_ids))
    return resolved, problems


@dataclass(frozen=True)
class Access:
    """Whether a rollout owns / sees a sufficient state (see the module docstring)."""

    owns: bool
    sees: bool


def sufficient_access(
    states: ObservedStates, sufficient: dict[str, tuple[str, ...]], count: int
) -> dict[str, Access]:
    """Access of each rollout id R1..Rn to the sufficient states."""
    original = states.original.state_id in sufficient
    out = {}
    for i in range(count):
        owns = any(s.state_id in sufficient for s in states.owned_by(i))
        out[rollout_id(i)] = Access(owns, owns or original)
    return out


def reconcile(
    diagnoses: Sequence[Diagnosis], labels: Sequence[bool], access: dict[str, Access]
) -> tuple[list[Diagnosis], int]:
    """Mixed groups: make stages agree with labels and sufficient states (see module)."""
    out, changed = [], 0
    for d in diagnoses:
        index = _rollout_index(d.rollout_id, len(labels))
        stage = d.stage
        if index is not None:
            stage = _reconciled_stage(d.stage, labels[index], access[d.rollout_id])
        changed += stage != d.stage
        out.append(replace(d, stage=stage))
    return out, changed


def _reconciled_stage(stage: str, correct: bool, access: Access) -> str:
    if correct:
        return "CORRECT"
    if not access.sees and stage != "OTHER":
        return "ACQUIRE"
    if (access.owns and stage == "ACQUIRE") or stage == "CORRECT":
        return "READ"
    return stage


def _rollout_index(rid: str, count: int) -> int | None:
    return next((i for i in range(count) if rollout_id(i) == rid), None)


def check_diagnoses(
    diagnoses: Sequence[Diagnosis], labels: Sequence[bool], access: dict[str, Access]
) -> list[str]:
    """Problems: wrong number / unknown / duplicate rollout ids, stages against labels."""
    expected = [rollout_id(i) for i in range(len(labels))]
    given = [d.rollout_id for d in diagnoses]
    if sorted(given) != sorted(expected):
        return [f"diagnoses are for {given}, expected exactly one for each of {expected}"]
    all_correct = all(labels)
    problems = []
    for d in diagnoses:
        correct = labels[expected.index(d.rollout_id)]
        if correct != (d.stage == "CORRECT"):
            label = "correct" if correct else "wrong"
            problems.append(f"{d.rollout_id}: stage {d.stage} contradicts its {label} answer")
        elif d.stage in ("READ", "GROUND") and not access[d.rollout_id].sees:
            problems.append(f"{d.rollout_id}: {d.stage} without a sufficient state it could see")
        elif d.stage == "ACQUIRE" and access[d.rollout_id].owns:
            problems.append(f"{d.rollout_id}: ACQUIRE although it owns a sufficient state")
        if all_correct and d.discrepancy.strip():
            problems.append(f"{d.rollout_id}: all-correct groups need an empty discrepancy")
    return problems


def select_anchor(
    candidates: Sequence[ObservedState], sufficient: dict[str, tuple[str, ...]]
) -> ObservedState:
    """e* = argmin over `candidates` of the cost of Eq. 13."""
    return min(candidates, key=lambda s: anchor_cost(s, sufficient[s.state_id]))


def check_and_assemble(
    output: CriticOutput | None,
    states: ObservedStates,
    labels: Sequence[bool],
    shown_image_ids: frozenset[str],
) -> Assembly:
    """Algorithm 4 for one group; see the module docstring for every rule."""
    none: list[Reflection | None] = [None] * len(labels)
    if output is None:
        return Assembly(none, "missing")
    sufficient, problems = resolve_sufficient(output, states, shown_image_ids)
    if problems:
        return Assembly(none, "invalid", problems)
    access = sufficient_access(states, sufficient, len(labels))
    kind = group_kind(labels)
    diagnoses, changed = list(output.rollout_diagnoses), 0
    if kind == "mixed":
        diagnoses, changed = reconcile(diagnoses, labels, access)
    if not output.applicable:
        return Assembly(none, "inapplicable", [], diagnoses, changed)
    problems = check_diagnoses(diagnoses, labels, access)
    if problems:
        return Assembly(none, "invalid", problems, diagnoses, changed)
    by_id = {d.rollout_id: BreakPoint(d.stage, d.discrepancy) for d in diagnoses}
    breaks = [by_id[rollout_id(i)] for i in range(len(labels))]
    if kind == "all_wrong":
        return Assembly(
            [Reflection(None, b) for b in breaks], "diagnosis_only", [], diagnoses, changed
        )
    chosen = [s for s in states.states if s.state_id in sufficient]
    group_ref = [s for s in chosen if s.owner is None or labels[s.owner]]
    if not group_ref:
        return Assembly(none, "no_reference", [], diagnoses, changed)
    reflections: list[Reflection | None] = []
    for i, b in enumerate(breaks):
        own = [s for s in chosen if s.owner == i]
        state = select_anchor(own or group_ref, sufficient)
        reflections.append(Reflection(_anchor(state, sufficient, states, output), b))
    return Assembly(reflections, "complete", [], diagnoses, changed)


def _anchor(
    state: ObservedState,
    sufficient: dict[str, tuple[str, ...]],
    states: ObservedStates,
    output: CriticOutput,
) -> Anchor:
    support = sufficient[state.state_id]
    originals = set(states.original.image_ids)
    keys = tuple(states.image_keys[i] for i in support if i not in originals)
    return Anchor(state, support, keys, output.reading, output.grounding)


COVERAGE_KEYS = (
    "complete",
    "diagnosis_only",
    "missing",
    "inapplicable",
    "invalid",
    "no_reference",
    "misaligned",
)


def impact_sparsity(impacts: Iterable[Tensor], top_fraction: float = 0.2) -> float | None:
    """Share of pooled total impact in the top `top_fraction` of positions; None if none."""
    pooled = [s.detach().flatten().double().cpu() for s in impacts]
    if not pooled:
        return None
    values = torch.cat(pooled)
    total = values.sum().item()
    if values.numel() == 0 or total <= 0:
        return None
    top = torch.topk(values, high_count(values.numel(), top_fraction)).values
    return top.sum().item() / total


def slot_statuses(assembly: Assembly, aligned: Sequence[bool] | None = None) -> list[str]:
    """Coverage status of each rollout slot of one group; `aligned[i]` from the teacher check."""
    out = []
    for i, reflection in enumerate(assembly.reflections):
        if reflection is None:
            out.append(assembly.status if assembly.status in COVERAGE_KEYS else "missing")
        elif aligned is not None and not aligned[i]:
            out.append("misaligned")
        else:
            out.append("complete" if reflection.complete else "diagnosis_only")
    return out


def coverage_counts(statuses: Iterable[str]) -> dict[str, int]:
    """Counts for every coverage key (zeros included), so logs always have the same columns."""
    counts = Counter(statuses)
    return {key: counts.get(key, 0) for key in COVERAGE_KEYS}


def stage_counts(assemblies: Iterable[Assembly]) -> dict[str, int]:
    """Stages of the accepted (checked, reconciled) diagnoses."""
    counts: Counter[str] = Counter()
    for a in assemblies:
        if a.status in ("complete", "diagnosis_only", "no_reference"):
            counts.update(d.stage for d in a.diagnoses)
    return {s: counts.get(s, 0) for s in ("CORRECT", "ACQUIRE", "READ", "GROUND", "OTHER")}
