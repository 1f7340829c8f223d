"""Hand-built trajectories and critic outputs for the ReVuE component tests."""

from __future__ import annotations

from collections.abc import Sequence

from beacon.benchmarks.base import Benchmark
from beacon.rollout import score
from beacon.train.opd.critic_schema import (
    CriticOutput,
    Diagnosis,
    Grounding,
    Reading,
    SufficientState,
)
from beacon.types import EvidenceState, Sample, Segment, ToolCall, Trajectory
from beacon.verify import Judge


def labels(
    trajectories: Sequence[Trajectory], sample: Sample, judge: Judge | None = None
) -> list[bool]:
    """Correctness labels c_i as a run gets them: the (generic) benchmark scorer's verdicts."""
    return [score(Benchmark(), t, sample, judge).correct for t in trajectories]


def make_trajectory(
    calls: list[list[str]],
    answer: str | None = "A",
    code_tokens: int = 10,
    original: tuple[str, ...] = ("k_orig",),
) -> Trajectory:
    """A trajectory with one executed call per entry of `calls` (its returned image keys).

    Each call's code segment has `code_tokens` tokens; ids are made up but consistent.
    """
    traj = Trajectory(sample_id="s1", mode="tool", format="thyme")
    traj.segments.append(Segment("prompt", "<prompt>", [1, 2, 3], images=list(original)))
    code_total = 0
    for k, keys in enumerate(calls):
        traj.segments.append(Segment("generated", f"think {k} <code>", [10 + k]))
        traj.segments.append(Segment("generated", "crop()</code>", [20] * code_tokens, kind="code"))
        code_total += code_tokens
        traj.tool_calls.append(ToolCall(code="crop()", executed=True, ok=True, stdout=f"out {k}"))
        traj.tool_calls[-1].images = list(keys)
        traj.segments.append(Segment("observation", "<obs>", [30, 31], images=list(keys)))
        traj.evidence.append(
            EvidenceState(
                segment_index=len(traj.segments) - 1,
                token_position=0,
                images_available=len(original) + sum(len(c) for c in calls[: k + 1]),
                tool_calls=k + 1,
                code_tokens=code_total,
            )
        )
    text = "" if answer is None else f"<answer>{answer}</answer>"
    traj.segments.append(Segment("generated", f"final {text}", [40, 41]))
    traj.final_answer = answer
    return traj


def critic_output(
    sufficient: dict[str, list[str]],
    stages: list[str],
    discrepancies: list[str] | None = None,
    applicable: bool = True,
) -> CriticOutput:
    """A schema-valid critic output with diagnoses R1..Rn in order."""
    discrepancies = discrepancies or ["" if s == "CORRECT" else f"why {s}" for s in stages]
    return CriticOutput(
        applicable=applicable,
        sufficient_states=tuple(SufficientState(k, tuple(v)) for k, v in sufficient.items()),
        reading=Reading("plate number", "S QT 911", "the plate reads S QT 911"),
        grounding=Grounding("the option whose text equals the plate is the answer"),
        rollout_diagnoses=tuple(
            Diagnosis(f"R{i + 1}", s, d)
            for i, (s, d) in enumerate(zip(stages, discrepancies, strict=True))
        ),
    )
