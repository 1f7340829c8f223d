"""Optional refinement of verified expert trajectories (beacon.md §2): the expert rewrites its
reasoning while the executed code and its real outputs stay verbatim.

The expert gets the image, the question and the trajectory with its reasoning steps marked
`<step>` and the code and outputs shown as fixed, and replies with the same number of
`<step>...</step>` blocks. A rewrite is adopted only when it keeps the structure (one step per
reasoning segment, the step before each code block still ends where the code starts) and its
answer still verifies; otherwise the original stays and the reason is counted. Code and
observation segments are never sent back as editable text, so they cannot change.

Outcomes are appended to `expert/refined.jsonl` as they are decided (one line per trajectory,
by eval key), so a rerun of the expert stage does not ask again.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from beacon.agent.formats import THYME
from beacon.benchmarks import get_benchmark
from beacon.engines.base import GenerationRequest, SamplingParams
from beacon.images import load_image
from beacon.jsonl import JsonlWriter, read_jsonl, repair_jsonl
from beacon.progress import track
from beacon.types import Sample, Segment, Trajectory

REFINED_FILE = "refined.jsonl"
REFINE_TASK = "Rewrite the reasoning steps"
REFINE_SYSTEM = (
    f"{REFINE_TASK} of a verified visual solution so they are clear, correct and explain why "
    "each tool call is made. The code blocks and their outputs are fixed and must not change. "
    "Reply with exactly one <step>...</step> block per step, in order; keep the final "
    "<answer>...</answer> in the last step and keep the same answer."
)
_STEP = re.compile(r"<step>(.*?)</step>", re.S)


@dataclass
class RefineOutcome:
    """One trajectory's refinement: the new step texts, or why the original stays."""

    key: str
    steps: list[str] | None
    reason: str | None = None


def reasoning_indices(traj: Trajectory) -> list[int]:
    """Indices of the generated text segments: the steps refinement may rewrite (code and sandbox
    outputs stay fixed)."""
    return [i for i, s in enumerate(traj.segments) if s.role == "generated" and s.kind == "text"]


def refine_request(traj: Trajectory, sample: Sample, image: Any) -> GenerationRequest:
    """The request showing editable steps and fixed code/outputs."""
    parts = []
    for segment in traj.segments[1:]:
        if segment.role == "generated" and segment.kind == "text":
            parts.append(f"<step>{segment.text.removesuffix(THYME.call_open)}</step>")
        else:
            parts.append(f"[fixed, not to rewrite]\n{segment.text}")
    text = f"Question: {sample.question}\n\nSolution:\n" + "\n".join(parts)
    messages = [
        {"role": "system", "content": REFINE_SYSTEM},
        {
            "role": "user",
            "content": [{"type": "image", "image": image}, {"type": "text", "text": text}],
        },
    ]
    return GenerationRequest(messages=messages, sampling=SamplingParams(max_new_tokens=2048))


def check_rewrite(traj: Trajectory, reply: str, sample: Sample) -> RefineOutcome:
    """Parse and check a rewrite (module docstring); the outcome names a failed check."""
    key = traj.metadata.get("eval_key", traj.sample_id)
    steps = [s.strip("\n") for s in _STEP.findall(reply)]
    indices = reasoning_indices(traj)
    if len(steps) != len(indices):
        return RefineOutcome(key, None, "step_count")
    if any(THYME.call_open in s or THYME.call_close in s for s in steps):
        return RefineOutcome(key, None, "code_in_step")
    new = apply_steps(traj, steps)
    answer = THYME.final_answer(new.generated_text)
    if answer is None:
        return RefineOutcome(key, None, "no_answer")
    bench = get_benchmark(traj.metadata["benchmark"])
    if not bench.score(new.generated_text, sample).correct:
        return RefineOutcome(key, None, "answer_changed")
    return RefineOutcome(key, steps)


def apply_steps(traj: Trajectory, steps: list[str]) -> Trajectory:
    """A copy of `traj` whose reasoning segments read `steps` (code and outputs untouched)."""
    segments = list(traj.segments)
    for i, text in zip(reasoning_indices(traj), steps, strict=True):
        old = segments[i]
        ends_in_code = old.text.endswith(THYME.call_open)
        new_text = text.rstrip() + ("\n" + THYME.call_open if ends_in_code else "")
        segments[i] = Segment(role="generated", text=new_text, kind="text", images=old.images)
    data = asdict(traj)
    data["segments"] = [asdict(s) for s in segments]
    new = Trajectory.from_dict(data)
    new.final_answer = THYME.final_answer(new.generated_text)
    new.metadata = {**traj.metadata, "refined": True}
    return new


def refine_all(
    engine: Any,
    trajectories: list[Trajectory],
    samples: dict[str, Sample],
    folder: Any,
    progress: bool,
) -> list[Trajectory]:
    """Refined (or original) trajectories, in order; outcomes cached in refined.jsonl."""
    path = folder / REFINED_FILE
    repair_jsonl(path)
    done = {r["key"]: RefineOutcome(**r) for r in read_jsonl(path)}
    todo = [t for t in trajectories if t.metadata["eval_key"] not in done]
    writer = JsonlWriter(path)
    try:
        chunks = range(0, len(todo), 8)
        for start in track(chunks, "refine", total=len(chunks), unit="chunk", enabled=progress):
            chunk = todo[start : start + 8]
            requests = [
                refine_request(t, samples[_key(t)], load_image(samples[_key(t)].images[0]))
                for t in chunk
            ]
            for traj, result in zip(chunk, engine.generate(requests), strict=True):
                if result.finish_reason == "error":
                    continue  # asked again on the next run
                outcome = check_rewrite(traj, result.text, samples[_key(traj)])
                writer.write(asdict(outcome))
                done[outcome.key] = outcome
    finally:
        writer.close()
    out = []
    for traj in trajectories:
        outcome = done.get(traj.metadata["eval_key"])
        ok = outcome is not None and outcome.steps is not None
        out.append(apply_steps(traj, outcome.steps) if ok else traj)
    return out


def _key(traj: Trajectory) -> str:
    return f"{traj.metadata['benchmark']}/{traj.sample_id}"
