"""OPD's teacher check (docs/train.md, "The teacher check"): before step 1, is the teacher better
than the student on the student's own rollouts?

On the pool's first `teacher_check.items` items (M rollouts each, the step's settings, seed scope
"check") it measures the accuracy of the student's rollouts and of the teacher's own (same seeds
and scorer; in-process teachers only) and the mean log-prob per token of the student's
verified-correct continuations under both. The teacher is better when more accurate; at equal
accuracy (or with a teacher server) when its log-prob gain exceeds `min_logprob_gain`. Accuracy
decides first: a much stronger teacher can give a weak student's correct continuations a lower
log-prob than the student does (it writes the same answer with other tokens). A reflection or
gt teacher is also compared with its base prompt on those continuations, overall and on the
digits written in code (the crop coordinates): ReVuE up-weights the positions its context
moves, so a context that lowers them (by more than `context_tolerance`) corrupts the targets it
weights most. Each finding warns or stops (`on_fail`, `on_context_hurts`); `teacher_check.json`
records it, and a resume reads it back. A shuffled-reflection control
(`revue.reflection_source: shuffled`) is measured with its borrowed reflections, and a context
that hurts only warns there: another item's reflection is expected to mislead the teacher.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from pydantic import BaseModel, computed_field

from beacon.errors import UserError
from beacon.jsonl import write_atomic
from beacon.rollout import Rollouts
from beacon.train.core.encode import code_digit_mask
from beacon.train.opd.config import TeacherCheckConfig
from beacon.train.opd.score import supervised_positions
from beacon.train.opd.step import (
    Distilled,
    OPDParts,
    borrow_reflections,
    collect,
    collect_critic,
    conditioned_scores,
    submit_critic,
)
from beacon.types import Trajectory

logger = logging.getLogger(__name__)

CHECK_FILE = "teacher_check.json"
SCOPE = "check"


class ContextEffect(BaseModel):
    """Mean log-prob per token of correct continuations, conditioned teacher vs base teacher,
    over all their tokens and over the coordinate tokens (None: there were none)."""

    tokens: int
    base: float
    conditioned: float
    coordinate_tokens: int
    coordinate_base: float | None
    coordinate_conditioned: float | None

    def hurts(self, tolerance: float) -> bool:
        """The context lowers the log-prob of correct tokens by more than `tolerance` nats per
        token, overall or on coordinates."""
        if self.conditioned < self.base - tolerance:
            return True
        before, after = self.coordinate_base, self.coordinate_conditioned
        return before is not None and after is not None and after < before - tolerance

    def line(self) -> str:
        text = f"conditioned {self.conditioned:.4f} vs base {self.base:.4f} nats/token"
        if self.coordinate_base is not None and self.coordinate_conditioned is not None:
            text += (
                f", on {self.coordinate_tokens} coordinate tokens "
                f"{self.coordinate_conditioned:.4f} vs {self.coordinate_base:.4f}"
            )
        return text


class TeacherCheck(BaseModel):
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

    @computed_field
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
        teacher = "n/a" if self.teacher_accuracy is None else f"{self.teacher_accuracy:.3f}"
        text = (
            f"accuracy teacher {teacher} vs student {self.student_accuracy:.3f} on "
            f"{self.rollouts} student rollouts of {self.items} items; "
        )
        if self.logprob_gain is None:
            return text + "no verified-correct rollout to score"
        return text + (
            f"mean log-prob of the {self.correct_tokens} tokens of {self.correct_rollouts} "
            f"verified-correct continuations: teacher {self.teacher_logprob:.4f} vs student "
            f"{self.student_logprob:.4f} nats/token (gain {self.logprob_gain:+.4f})"
        )


def measure(parts: OPDParts, teacher_rollouts: Rollouts | None) -> TeacherCheck:
    """Run the probe (module docstring); no gradient, no optimizer step."""
    samples = parts.samples[: parts.cfg.teacher_check.items]
    distilled, _ = collect(parts, samples, list(range(len(samples))), SCOPE)
    rollouts = sum(len(d.encoded) for d in distilled)
    correct = [(d, i) for d in distilled for i, ok in enumerate(d.labels) if ok]
    student = [_sampled(parts, parts.student, d, i) for d, i in correct]
    teacher = [_sampled(parts, parts.teacher, d, i) for d, i in correct]
    teacher_accuracy = None
    if teacher_rollouts is not None:
        groups, _ = teacher_rollouts.groups(samples, SCOPE)
        verdicts = [ok for g in groups for ok in g.correct]
        teacher_accuracy = sum(verdicts) / max(len(verdicts), 1)
    return TeacherCheck(
        items=len(samples),
        rollouts=rollouts,
        correct_rollouts=len(correct),
        correct_tokens=sum(t.numel() for t in student),
        student_accuracy=len(correct) / max(rollouts, 1),
        teacher_accuracy=teacher_accuracy,
        student_logprob=_mean(student),
        teacher_logprob=_mean(teacher),
        context=_context_effect(parts, distilled, correct, teacher),
    )


def _sampled(parts: OPDParts, scorer: Any, d: Distilled, i: int) -> torch.Tensor:
    """Full-vocabulary log-probs [T] of trajectory i's sampled tokens under `scorer`."""
    revue = parts.cfg.revue
    scores = scorer.teacher_scores(d.encoded[i], revue.k_support, revue.chunk_size)
    return scores.sampled_logprob.cpu()


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
        if parts.cfg.revue.reflection_source == "shuffled":
            borrow_reflections(parts, distilled, SCOPE, keep=False)
    plain, conditioned, coordinates = [], [], []
    for (d, i), logprobs in zip(correct, base, strict=True):
        scores = conditioned_scores(parts, d, i)
        if scores is not None and scores.num_positions == logprobs.numel():
            plain.append(logprobs)
            conditioned.append(scores.sampled_logprob.cpu())
            coordinates.append(coordinate_mask(d.group.trajectories[i], d.encoded[i], parts))
    if not plain:
        return None
    mask = torch.cat(coordinates)
    return ContextEffect(
        tokens=int(mask.numel()),
        base=_mean(plain),
        conditioned=_mean(conditioned),
        coordinate_tokens=int(mask.sum()),
        coordinate_base=_mean([torch.cat(plain)[mask]]),
        coordinate_conditioned=_mean([torch.cat(conditioned)[mask]]),
    )


def coordinate_mask(trajectory: Trajectory, encoded: Any, parts: Any) -> torch.Tensor:
    """[T] over the supervised positions: True where the token is a digit written in a code
    segment (the crop coordinates a trajectory copies from what it saw)."""
    flags = code_digit_mask(trajectory, parts.tokenizer.decode)
    positions = supervised_positions(encoded)
    if len(flags) != len(encoded.input_ids):  # trained on another prompt than sampled (HGCE)
        return torch.zeros(len(positions), dtype=torch.bool)
    return torch.tensor(flags, dtype=torch.bool)[positions]


def teacher_check(
    parts: OPDParts, cfg: TeacherCheckConfig, teacher_rollouts: Rollouts | None
) -> TeacherCheck:
    """Measure (or read back) the check, record it, and stop or warn as `cfg` says (the
    recipe calls it only with `cfg.enabled`)."""
    path = parts.run_dir / CHECK_FILE
    if path.exists():
        check = TeacherCheck.model_validate_json(path.read_text())
    else:
        check = measure(parts, teacher_rollouts)
        if parts.policy.accelerator.is_main_process:
            write_atomic(path, check.model_dump_json(indent=2) + "\n")
    logger.info("teacher check: %s", check.line())
    if check.context is not None and check.context.hurts(cfg.context_tolerance):
        problem = (
            f"the teacher's context lowers its log-prob of correct continuations "
            f"({check.context.line()}); ReVuE's weights would favour those targets"
        )
        if parts.cfg.revue.reflection_source == "shuffled":
            logger.warning(
                "teacher check: %s (revue.reflection_source=shuffled: the content control's "
                "borrowed reflections are meant to mislead; training anyway)",
                problem,
            )
        else:
            _fail(
                problem,
                "teacher_check.on_context_hurts",
                cfg.on_context_hurts,
                "Teach the teacher to read its context, or distil with teacher.context=base",
            )
    if not check.better(cfg.min_logprob_gain):
        _fail(
            f"the teacher is not better than the student on the student's own rollouts "
            f"({check.line()}); OPD would pull the student towards a teacher that knows no "
            "more than it does",
            "teacher_check.on_fail",
            cfg.on_fail,
            "Use a stronger teacher (teacher.path)",
        )
    return check


def _fail(problem: str, setting: str, mode: str, fix: str) -> None:
    """Stop with `problem` and how to go on, or (mode `warn`) log it and go on."""
    if mode == "warn":
        logger.warning("teacher check: %s (%s=warn: training anyway)", problem, setting)
        return
    raise UserError(
        f"{problem}. {fix}, or train anyway with --resume --set {setting}=warn (the measurement "
        f"is in {CHECK_FILE})"
    )
