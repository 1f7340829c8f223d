"""OPD's teacher check: before step 1, is the teacher better than the student where OPD uses it,
on the student's own rollouts?

OPD's commonest silent failure is a teacher that is not better than the student on the
student's own prefixes: the run then spends its compute pulling the student towards a
distribution that knows no more than its own (a teacher equal to the student), or towards
corrupted targets (a conditioned teacher whose context breaks what it could do without it).
The check measures, on the pool's first `teacher_check.items` items with the step's rollout
settings (M rollouts each, seed scope "check"):

1. accuracy: the student's rollouts, and the teacher's own rollouts of the same items with the
   same seeds and the benchmark's scorer (an in-process teacher only: a teacher server scores
   sequences, it does not generate);
2. the mean log-prob per token (full-vocabulary normalised) of the student's verified-correct
   continuations, every supervised token of every correct rollout, under the teacher and under
   the student; the gain is teacher - student.

The teacher is better when it is more accurate than the student; at equal accuracy (or with
a teacher server, whose accuracy is not measured) when the gain exceeds
`teacher_check.min_logprob_gain`. Accuracy decides first because a much stronger teacher can
still give a weak student's correct continuations a lower log-prob than the student does (it
writes the same answer with other tokens). A teacher that is not better stops the run before
step 1 (`teacher_check.on_fail=error`, the default) or is logged as a warning (`warn`).

With a conditioned teacher (`teacher.context` reflection or gt) the same correct continuations
are also scored with the conditioned prompt (the critic's reflection, or the reference answer)
and compared with the base prompt: over all their tokens, and over the tokens that copy crop
coordinates (digits in code segments). A context that lowers either is a warning (or, with
`teacher_check.on_context_hurts=error`, stops the run): ReVuE weights positions by how much the
context moves them, so it would up-weight exactly those targets.

The result is `teacher_check.json` in the run folder; a resumed run reads it back instead of
measuring again, and applies the current `on_fail` to it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from typing import Any

import torch

from beacon.data.records import write_atomic
from beacon.errors import UserError
from beacon.rollout import Rollouts
from beacon.train.opd.config import TeacherCheckConfig
from beacon.train.opd.score import supervised_positions
from beacon.train.opd.step import (
    Distilled,
    OPDParts,
    collect,
    collect_critic,
    conditioned_scores,
    submit_critic,
)
from beacon.types import Trajectory

logger = logging.getLogger(__name__)

CHECK_FILE = "teacher_check.json"
SCOPE = "check"


@dataclass
class ContextEffect:
    """Mean log-prob per token of correct continuations, conditioned teacher vs base teacher,
    over all their tokens and over the coordinate tokens (digits in code)."""

    tokens: int
    base: float
    conditioned: float
    coordinate_tokens: int
    coordinate_base: float | None
    coordinate_conditioned: float | None

    @property
    def hurts(self) -> bool:
        """The context lowers the log-prob of correct tokens, overall or on coordinates."""
        coordinates = self.coordinate_base is not None and self.coordinate_conditioned is not None
        return self.conditioned < self.base or (
            coordinates and self.coordinate_conditioned < self.coordinate_base
        )


@dataclass
class TeacherCheck:
    """What the check measured (`teacher_accuracy` None: the teacher is a scoring server)."""

    items: int
    rollouts: int
    correct_rollouts: int
    correct_tokens: int
    student_accuracy: float
    teacher_accuracy: float | None
    student_logprob: float | None
    teacher_logprob: float | None
    context: ContextEffect | None = None

    @property
    def logprob_gain(self) -> float | None:
        if self.student_logprob is None or self.teacher_logprob is None:
            return None
        return self.teacher_logprob - self.student_logprob

    def better(self, min_logprob_gain: float) -> bool:
        """The rule of the module docstring."""
        teacher, student = self.teacher_accuracy, self.student_accuracy
        if teacher is not None and teacher != student:
            return teacher > student
        return self.logprob_gain is not None and self.logprob_gain > min_logprob_gain

    def line(self) -> str:
        """One line for the log and the error: accuracies and log-probs side by side."""
        teacher_acc = "n/a" if self.teacher_accuracy is None else f"{self.teacher_accuracy:.3f}"
        text = (
            f"accuracy teacher {teacher_acc} vs student {self.student_accuracy:.3f} on "
            f"{self.rollouts} student rollouts of {self.items} items"
        )
        if self.logprob_gain is not None:
            text += (
                f"; mean log-prob of the {self.correct_tokens} tokens of {self.correct_rollouts} "
                f"verified-correct continuations: teacher {self.teacher_logprob:.4f} vs student "
                f"{self.student_logprob:.4f} nats/token (gain {self.logprob_gain:+.4f})"
            )
        else:
            text += "; no verified-correct rollout to score"
        return text

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "logprob_gain": self.logprob_gain}, indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TeacherCheck:
        data = {k: v for k, v in data.items() if k != "logprob_gain"}
        context = data.pop("context", None)
        return cls(**data, context=None if context is None else ContextEffect(**context))


def measure(parts: OPDParts, teacher_rollouts: Rollouts | None) -> TeacherCheck:
    """Run the probe (module docstring); no gradient, no optimizer step."""
    cfg = parts.cfg
    samples = parts.samples[: cfg.teacher_check.items]
    slots = list(range(len(samples)))
    distilled, _ = collect(parts, samples, slots, SCOPE)
    rollouts = sum(len(d.encoded) for d in distilled)
    correct = [(d, i) for d in distilled for i, ok in enumerate(d.labels) if ok]
    student = [_sampled(parts.student, d.encoded[i], parts) for d, i in correct]
    teacher = [_sampled(parts.teacher, d.encoded[i], parts) for d, i in correct]
    teacher_accuracy = None
    if teacher_rollouts is not None:
        groups, _ = teacher_rollouts.groups(samples, SCOPE)
        answered = sum(len(g.correct) for g in groups)
        teacher_accuracy = sum(sum(g.correct) for g in groups) / max(answered, 1)
    tokens = sum(t.numel() for t in student)
    return TeacherCheck(
        items=len(samples),
        rollouts=rollouts,
        correct_rollouts=len(correct),
        correct_tokens=tokens,
        student_accuracy=len(correct) / max(rollouts, 1),
        teacher_accuracy=teacher_accuracy,
        student_logprob=_mean(student),
        teacher_logprob=_mean(teacher),
        context=_context_effect(parts, distilled, correct, teacher),
    )


def _sampled(scorer: Any, encoded: Any, parts: OPDParts) -> torch.Tensor:
    revue = parts.cfg.revue
    return scorer.teacher_scores(encoded, revue.k_support, revue.chunk_size).sampled_logprob.cpu()


def _mean(values: list[torch.Tensor]) -> float | None:
    pooled = torch.cat(values) if values else torch.empty(0)
    return float(pooled.double().mean()) if pooled.numel() else None


def _context_effect(
    parts: OPDParts,
    distilled: list[Distilled],
    correct: list[tuple[Distilled, int]],
    base: list[torch.Tensor],
) -> ContextEffect | None:
    """The conditioned teacher against the base one on the correct continuations."""
    context = parts.cfg.teacher.context
    if context == "base" or not correct:
        return None
    if context == "reflection":
        submit_critic(parts, distilled, 0)  # logged in critic.jsonl as step 0
        collect_critic(distilled)
    pairs, coordinates = [], []
    for (d, i), plain in zip(correct, base, strict=True):
        scores = conditioned_scores(parts, d, i)
        if scores is None or scores.num_positions != plain.numel():
            continue
        pairs.append((plain, scores.sampled_logprob.cpu()))
        coordinates.append(coordinate_mask(d.group.trajectories[i], d.encoded[i], parts.tokenizer))
    if not pairs:
        return None
    plain = torch.cat([p for p, _ in pairs])
    conditioned = torch.cat([c for _, c in pairs])
    mask = torch.cat(coordinates)
    return ContextEffect(
        tokens=plain.numel(),
        base=float(plain.double().mean()),
        conditioned=float(conditioned.double().mean()),
        coordinate_tokens=int(mask.sum()),
        coordinate_base=_mean([plain[mask]]),
        coordinate_conditioned=_mean([conditioned[mask]]),
    )


def coordinate_mask(trajectory: Trajectory, encoded: Any, tokenizer: Any) -> torch.Tensor:
    """[T] over the supervised positions: True where the token is a digit written in a code
    segment (the crop coordinates a trajectory copies from what it saw)."""
    flags: list[bool] = []
    for segment in trajectory.segments:
        code = segment.role == "generated" and segment.kind == "code"
        for token in segment.token_ids:
            flags.append(code and any(ch.isdigit() for ch in tokenizer.decode([token])))
    if len(flags) != len(encoded.input_ids):  # a trajectory trained on another prompt (HGCE)
        return torch.zeros(len(supervised_positions(encoded)), dtype=torch.bool)
    return torch.tensor(flags, dtype=torch.bool)[supervised_positions(encoded)]


def teacher_check(
    parts: OPDParts, cfg: TeacherCheckConfig, teacher_rollouts: Rollouts | None
) -> TeacherCheck | None:
    """Measure (or read back) the check, record it, and stop or warn as `cfg.on_fail` says."""
    if not cfg.enabled:
        return None
    path = parts.run_dir / CHECK_FILE
    if path.exists():
        check = TeacherCheck.from_dict(json.loads(path.read_text()))
    else:
        check = measure(parts, teacher_rollouts)
        if parts.policy.accelerator.is_main_process:
            write_atomic(path, check.to_json())
    logger.info("teacher check: %s", check.line())
    _apply(check, cfg)
    return check


def _apply(check: TeacherCheck, cfg: TeacherCheckConfig) -> None:
    effect = check.context
    if effect is not None and effect.hurts:
        coordinates = (
            ""
            if effect.coordinate_base is None or effect.coordinate_conditioned is None
            else f", on {effect.coordinate_tokens} coordinate tokens "
            f"{effect.coordinate_conditioned:.4f} vs {effect.coordinate_base:.4f}"
        )
        message = (
            "the teacher's context lowers its log-prob of correct continuations (conditioned "
            f"{effect.conditioned:.4f} vs base {effect.base:.4f} nats/token{coordinates}); "
            "ReVuE's weights would favour those targets"
        )
        if cfg.on_context_hurts == "error":
            raise UserError(
                f"{message}. Teach the teacher to read its context, distil with "
                "teacher.context=base, or train anyway with --resume --set "
                "teacher_check.on_context_hurts=warn"
            )
        logger.warning("teacher check: %s; check how the context is shown to the teacher", message)
    if check.better(cfg.min_logprob_gain):
        return
    message = (
        f"the teacher is not better than the student on the student's own rollouts ({check.line()}"
        f"); OPD would pull the student towards a teacher that knows no more than it does"
    )
    if cfg.on_fail == "warn":
        logger.warning("teacher check: %s (teacher_check.on_fail=warn: training anyway)", message)
        return
    raise UserError(
        f"{message}. Use a stronger teacher (teacher.path), or train anyway with --resume "
        "--set teacher_check.on_fail=warn (the result is in teacher_check.json)"
    )
