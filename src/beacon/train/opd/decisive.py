"""Premise gates of a ReVuE comparison (design §2.5 item 4): the decisive-token probe and the
grounding gate, measured with the run's own teacher and reflections before any compared arm.

Decisive-token probe (the analogue of ReVuE's Table 13). Each case is a student rollout paired
with a reference correct continuation of the same prompt (a correct sibling of its group, or an
expert's trajectory encoded with the student's tokenizer). The decisive token is the first
generated token where the rollout leaves the reference (`score.first_divergence`): the state
before it is shared, so the teacher's next-token choice there says whether it would have kept
the student on the right path. The probe reads the teacher's argmax (its top-1 token) at that
position without the reflection, `a0`, and with it, `aR`, and counts how often it equals the
reference token, per stratum (a key over the item, e.g. the key's colour). Both passes are the
trainer's own: the base teacher on the student's exact ids (`teacher.teacher_scores`, as
`step.base_scores` runs it) and `step.conditioned_scores` (the run's teacher context; in a
shuffled control, the borrowed reflection). A rollout whose conditioned pass does not exist
(no reflection, misaligned) counts in `a0` only; `a0_reflected` is `a0` on the rollouts `aR`
is measured on, the paired comparison.

Grounding gate. A reflection that names the right answer could push the teacher to write it
against what the rollout's own evidence shows, and ReVuE would then up-weight a hallucination
(design risk G2). On rollouts whose evidence supports an answer d other than the reference (the
caller knows d: the digit in the cell the rollout cropped), the gate is the share where the
reflection-conditioned teacher's argmax at the answer position is still d.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from beacon.train.core.encode import EncodedTrajectory
from beacon.train.opd.revue_loss import TeacherScores
from beacon.train.opd.score import first_divergence, supervised_positions
from beacon.train.opd.step import Distilled, OPDParts, conditioned_scores
from beacon.types import Sample


@dataclass(frozen=True)
class ProbeCase:
    """Rollout `index` of `distilled`, a correct `reference` of the same prompt, its stratum."""

    distilled: Distilled
    index: int
    reference: EncodedTrajectory
    stratum: str


@dataclass
class StratumProbe:
    """One stratum's counts: `n` rollouts that diverge from their reference at a generated
    token, `base_right` of them where the base teacher's argmax is the reference token;
    `reflected` of them with a conditioned teacher pass, `reflected_right` where its argmax is
    the reference token and `base_right_reflected` where the base teacher's was."""

    stratum: str
    n: int = 0
    base_right: int = 0
    reflected: int = 0
    reflected_right: int = 0
    base_right_reflected: int = 0

    @property
    def a0(self) -> float | None:
        return self.base_right / self.n if self.n else None

    @property
    def a_r(self) -> float | None:
        return self.reflected_right / self.reflected if self.reflected else None

    @property
    def a0_reflected(self) -> float | None:
        return self.base_right_reflected / self.reflected if self.reflected else None

    def line(self) -> str:
        return (
            f"{self.stratum}: a0 {_share(self.base_right, self.n)}; on the {self.reflected} "
            f"with a reflection a0 {_share(self.base_right_reflected, self.reflected)} -> "
            f"aR {_share(self.reflected_right, self.reflected)}"
        )


@dataclass
class DecisiveProbe:
    """The probe per stratum (sorted by name); `no_divergence`: cases left out because the
    rollout never left its reference at a generated token (equal, a prefix, or first different
    at an observation)."""

    strata: list[StratumProbe] = field(default_factory=list)
    no_divergence: int = 0

    def stratum(self, name: str) -> StratumProbe:
        return next(s for s in self.strata if s.stratum == name)

    def line(self) -> str:
        parts = [s.line() for s in self.strata] or ["no rollout diverged from its reference"]
        return (
            "decisive-token probe (teacher argmax = reference token): "
            + "; ".join(parts)
            + f" ({self.no_divergence} without a decisive token)"
        )


def argmax_at(scores: TeacherScores, position: int) -> int:
    """The teacher's top-1 token at supervised position `position` (its top-K is descending)."""
    return int(scores.topk_ids[position, 0])


def decisive_probe(parts: OPDParts, cases: Sequence[ProbeCase]) -> DecisiveProbe:
    """`a0` and `aR` per stratum over `cases` (module docstring); no gradient."""
    revue = parts.cfg.revue
    strata: dict[str, StratumProbe] = {}
    out = DecisiveProbe()
    for case in cases:
        d, i = case.distilled, case.index
        encoded = d.encoded[i]
        position = first_divergence(encoded, case.reference)
        if position is None:
            out.no_divergence += 1
            continue
        right = case.reference.input_ids[int(supervised_positions(encoded)[position])]
        s = strata.setdefault(case.stratum, StratumProbe(case.stratum))
        base = parts.teacher.teacher_scores(encoded, revue.k_support, revue.chunk_size)
        base_right = argmax_at(base, position) == right
        s.n += 1
        s.base_right += base_right
        conditioned = conditioned_scores(parts, d, i)
        if conditioned is not None and conditioned.num_positions == base.num_positions:
            s.reflected += 1
            s.base_right_reflected += base_right
            s.reflected_right += argmax_at(conditioned, position) == right
    out.strata = [strata[k] for k in sorted(strata)]
    return out


def sibling_cases(
    distilled: Sequence[Distilled], stratum: Callable[[Sample], str]
) -> list[ProbeCase]:
    """Every wrong rollout paired with its group's first correct rollout (groups without a
    correct one give none), in the stratum `stratum(item)`."""
    out = []
    for d in distilled:
        reference = next((j for j, ok in enumerate(d.labels) if ok), None)
        if reference is None:
            continue
        key = stratum(d.group.sample)
        out.extend(
            ProbeCase(d, i, d.encoded[reference], key) for i, ok in enumerate(d.labels) if not ok
        )
    return out


@dataclass(frozen=True)
class GroundingCase:
    """Rollout `index` of `distilled`, whose own evidence supports the answer token
    `evidence_token` (not the reference's). `position` indexes its supervised positions at the
    answer token; None: the last supervised position where the rollout wrote `evidence_token`."""

    distilled: Distilled
    index: int
    evidence_token: int
    position: int | None = None


@dataclass
class GroundingGate:
    """`n` cases scored with the reflection-conditioned teacher, `kept` where its argmax at the
    answer position is the evidence's answer; `no_reflection`: cases without a conditioned pass;
    `unlocated`: no answer position given or found."""

    n: int = 0
    kept: int = 0
    no_reflection: int = 0
    unlocated: int = 0

    @property
    def share(self) -> float | None:
        return self.kept / self.n if self.n else None

    def passes(self, threshold: float) -> bool:
        """The gate holds: measured on at least one case and the share reaches `threshold`."""
        return self.share is not None and self.share >= threshold

    def line(self) -> str:
        return (
            f"grounding gate: the reflection-conditioned teacher keeps the answer its rollout's "
            f"evidence shows {_share(self.kept, self.n)} ({self.no_reflection} without a "
            f"reflection, {self.unlocated} without an answer position)"
        )


def grounding_gate(parts: OPDParts, cases: Sequence[GroundingCase]) -> GroundingGate:
    """The share of `cases` where the conditioned teacher's argmax at the answer position is
    the evidence's answer (module docstring); no gradient."""
    out = GroundingGate()
    for case in cases:
        d, i = case.distilled, case.index
        position = case.position
        if position is None:
            position = _last_written(d.encoded[i], case.evidence_token)
        if position is None:
            out.unlocated += 1
            continue
        conditioned = conditioned_scores(parts, d, i)
        if conditioned is None:
            out.no_reflection += 1
            continue
        out.n += 1
        out.kept += argmax_at(conditioned, position) == case.evidence_token
    return out


def _last_written(encoded: EncodedTrajectory, token: int) -> int | None:
    """The last supervised position whose token is `token`, or None."""
    positions = supervised_positions(encoded).tolist()
    hits = [k for k, t in enumerate(positions) if encoded.input_ids[t] == token]
    return hits[-1] if hits else None


def _share(hits: int, n: int) -> str:
    return f"{hits}/{n} = {hits / n:.2f}" if n else f"{hits}/0"
