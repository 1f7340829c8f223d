"""The annotation JSONL: one sampled rollout per line, with its group, trajectory and labels.

The format is documented in docs/annotate.md; `beacon annotate sample` writes it and the ReVuE
trainer will too. Loading checks every line and reports the problems all at once, so a corrupt
file or a foreign JSONL (an eval `samples.jsonl`, say) gets a message that names the lines and
says what the file should look like, instead of a page that half works.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from beacon.types import Trajectory

STAGES = ("CORRECT", "ACQUIRE", "READ", "GROUND", "OTHER")
"""The critic's stage labels (ReVuE §4.1): the first broken link of the evidence chain."""
LABELS = (*STAGES, "SKIP")
"""What an annotator may choose: the five stages, or SKIP when a rollout cannot be judged."""

Stage = Literal["CORRECT", "ACQUIRE", "READ", "GROUND", "OTHER"]
Label = Literal["CORRECT", "ACQUIRE", "READ", "GROUND", "OTHER", "SKIP"]
GroupType = Literal["all_correct", "mixed", "all_wrong"]
MAX_REPORTED = 5
"""How many bad lines a load error lists before it only counts the rest."""


class CriticLabel(BaseModel):
    """The critic's diagnosis of one rollout (extra keys such as `run` are kept)."""

    model_config = ConfigDict(extra="allow")
    stage: Stage = Field(description="First broken link: CORRECT, ACQUIRE, READ, GROUND, OTHER.")
    discrepancy: str = Field("", description="The critic's one-line reason.")


class HumanLabel(BaseModel):
    """An annotator's label; `stage` is None for a note saved before a stage was chosen."""

    model_config = ConfigDict(extra="allow")
    stage: Label | None = Field(description="One of the stages, or SKIP.")
    note: str = Field("", description="Free-text note.")
    annotator: str = Field("", description="Who labelled it.")


class AnnotationRow(BaseModel):
    """One line of the annotation JSONL; unknown keys are kept and exported unchanged."""

    model_config = ConfigDict(extra="allow")
    id: str = Field(description="Unique rollout id, e.g. the eval key 'synth/42/tool/3'.")
    group_id: str = Field(
        description="The group (the K rollouts of one item), e.g. 'synth/42/tool'."
    )
    group_type: GroupType = Field(description="all_correct, mixed or all_wrong by correctness.")
    rollout_id: int | str = Field(description="The rollout's index within its group.")
    question: str = Field(description="The question as the benchmark states it.")
    reference: str = Field(description="The reference answer.")
    images: list[str] = Field(
        description="Original images: paths relative to the file or absolute."
    )
    trajectory: dict[str, Any] = Field(description="A beacon.types.Trajectory as a dict.")
    final_answer: str | None = Field(description="The rollout's extracted final answer.")
    correct: bool = Field(description="Whether the final answer was judged correct.")
    image_root: str | None = Field(
        None, description="ImageStore folder of trajectory image keys, relative to the file."
    )
    critic: CriticLabel | None = Field(None, description="The critic's diagnosis, if any.")
    label: HumanLabel | None = Field(None, description="A human label carried in the file.")

    @field_validator("trajectory")
    @classmethod
    def _is_trajectory(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            Trajectory.from_dict(value)
        except (TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a beacon Trajectory dict ({exc})") from exc
        return value

    def parsed_trajectory(self) -> Trajectory:
        """The row's trajectory as a `Trajectory` (the row keeps the dict so an export writes back
        what was read)."""
        return Trajectory.from_dict(self.trajectory)


class AnnotationFileError(ValueError):
    """The annotation JSONL could not be used; the message lists the bad lines."""


def parse_rows(text: str, source: str) -> list[AnnotationRow]:
    """Rows of an annotation JSONL text; raises AnnotationFileError naming every bad line."""
    rows, problems, seen = [], [], set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        problem = None
        try:
            row = AnnotationRow.model_validate(json.loads(line))
        except ValueError as exc:  # json.JSONDecodeError and ValidationError are ValueErrors
            problem = _describe(exc)
        else:
            if row.id in seen:
                problem = f"duplicate id {row.id!r}"
            seen.add(row.id)
            rows.append(row)
        if problem:
            problems.append(f"line {number}: {problem}")
    if problems:
        raise AnnotationFileError(_problem_message(source, problems))
    if not rows:
        raise AnnotationFileError(f"{source} has no rows. {_HOW_TO_MAKE}")
    return rows


def load_rows(path: Path) -> list[AnnotationRow]:
    """Rows of the annotation JSONL at `path` (see `parse_rows`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AnnotationFileError(f"cannot read {path}: {exc}") from exc
    return parse_rows(text, str(path))


_HOW_TO_MAKE = (
    "An annotation file has one JSON object per line with id, group_id, group_type, rollout_id, "
    "question, reference, images, trajectory, final_answer and correct (docs/annotate.md); "
    "make one from an eval run with `beacon annotate sample RUN`."
)


def _describe(exc: ValueError) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for error in exc.errors()[:4]:
            where = ".".join(str(p) for p in error["loc"]) or "line"
            parts.append(f"{where}: {error['msg']}")
        more = len(exc.errors()) - 4
        return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
    return f"not valid JSON ({exc})"


def _problem_message(source: str, problems: list[str]) -> str:
    shown = problems[:MAX_REPORTED]
    more = len(problems) - len(shown)
    lines = [f"{source} is not a usable annotation file ({len(problems)} bad lines):"]
    lines += [f"  {p}" for p in shown]
    if more:
        lines.append(f"  ... and {more} more")
    lines.append(_HOW_TO_MAKE)
    return "\n".join(lines)
