"""The demo's ReVuE teacher learns to read a reflection before it teaches with one.

ReVuE's teacher scores the student's rollout with the critic's reflection R_i (and its support
images) added to its prompt (`beacon.revue.conditioning`). The paper's teachers are large
instruction-tuned VLMs that can read such text; the demo's 1.3M-parameter teacher never saw any,
and with a reflection in its prompt its distribution was noise: the per-token reverse KL started
at 5.5 against vanilla OPD's 0.03 and the distilled students collapsed (tool accuracy 0.00 with
uniform weights, 0.07 with ReVuE's) in the demo of 2026-12-01.

So before OPD the teacher (the best RL run) gets a short SFT on the expert's tool-mode
trajectories, each twice: as it is, and with the reflection the scripted critic would give for
it in the prompt. The reflection is built from the same pieces as the critic's answers
(`beacon.revue.scripted.reading` / `diagnosis`, rendered by `reflection_text`) and added by
`condition_messages`, the function the OPD teacher's prompt goes through, so the teacher learns
the prompts it will see. Its break point is drawn per row: CORRECT (the rollout is the expert's
own), READ or ACQUIRE with a wrong answer, the last two sometimes without an anchor (the
diagnosis-only reflections of all-wrong groups); the target is always the expert's correct
trajectory. Anchor as Algorithm 4 picks it for the rollout: its own crop when that holds the
evidence region (support: the crop), else the original image when it shows the evidence (easy
items), else none.

Every OPD variant (vanilla included) distils from this teacher, so they differ only in the
teacher's context and the token weights.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import replace
from pathlib import Path

from beacon.agent.transcript import messages_text, parse_prompt_text
from beacon.benchmarks.synth_demo import SynthDemo
from beacon.images import ImageStore
from beacon.jsonl import write_jsonl_atomic
from beacon.revue.assemble import Anchor, BreakPoint, Reflection
from beacon.revue.conditioning import condition_messages, reflection_text
from beacon.revue.critic_output import Grounding, Reading
from beacon.revue.scripted import GROUNDING, diagnosis, reading
from beacon.revue.states import ObservedState
from beacon.train.sft import read_trajectories
from beacon.types import Sample, Trajectory

TEACHER_DATA = "teacher-data"
ORIGINAL_STATE = ObservedState(0, "ORIGINAL_STATE", None, ("ORIGINAL_IMAGE",), (), 0, 0)
CROP_STATE = ObservedState(1, "R1_S1", 0, ("ORIGINAL_IMAGE", "R1_IMG1"), ("R1_IMG1",), 1, 1)
STAGES = ("CORRECT", "READ", "ACQUIRE")
DIAGNOSIS_ONLY_SHARE = 0.25
"""Of the rows with a wrong-answer break point, the share without an anchor (all-wrong groups)."""


def crop_key(trajectory: Trajectory) -> str | None:
    """The image the trajectory's crop returned (its first observation image), if any."""
    observed = [key for segment in trajectory.segments[1:] for key in segment.images]
    return observed[0] if observed else None


def scripted_reflection(
    sample: Sample, trajectory: Trajectory, stage: str, wrong: str, with_anchor: bool
) -> Reflection:
    """The reflection the scripted critic would give `trajectory` (see the module docstring)."""
    crop = crop_key(trajectory)
    anchor = None
    if with_anchor and (crop is not None or sample.metadata["difficulty"] == "easy"):
        state, ids, keys = (
            (CROP_STATE, ("R1_IMG1",), (crop,))
            if crop is not None
            else (ORIGINAL_STATE, ("ORIGINAL_IMAGE",), ())
        )
        read = reading(sample.question, sample.answer, sample.metadata.get("facts"))
        anchor = Anchor(state, ids, keys, Reading(**read), Grounding(**GROUNDING))
    label = "CORRECT" if stage == "CORRECT" else "INCORRECT"
    found = diagnosis("R1", label, f"Final answer: {wrong}", sample.answer, stage == "READ")
    return Reflection(anchor, BreakPoint(found["stage"], found["discrepancy"]))


def conditioned(trajectory: Trajectory, reflection: Reflection, store: ImageStore) -> Trajectory:
    """A copy of the text trajectory with `reflection` and its support images in the prompt,
    placed by `condition_messages` as in the OPD teacher's prompt."""
    prompt = trajectory.segments[0]
    keys = list(reflection.anchor.support_image_keys) if reflection.anchor else []
    messages = condition_messages(
        parse_prompt_text(prompt.text),
        reflection_text(reflection),
        [store.get(key) for key in keys],
    )
    segment = replace(prompt, text=messages_text(messages), images=[*prompt.images, *keys])
    return replace(trajectory, segments=[segment, *trajectory.segments[1:]])


def build_teacher_set(root: Path, samples: list[Sample], seed: int) -> dict[str, int]:
    """`root/teacher-data/trajectories.jsonl`: each tool-mode expert row of `root/sft/` on one
    of `samples` as it is and with a reflection (images stay in `root/sft/images`); returns
    counts by break point."""
    by_id = {s.id: s for s in samples}
    store = ImageStore(root / "sft" / "images")
    rng = random.Random(f"demo-teacher:{seed}")
    rows, counts = [], Counter[str]()
    for trajectory in read_trajectories([str(root / "sft" / "trajectories.jsonl")]):
        key = trajectory.metadata.get("eval_key", "")
        if trajectory.mode != "tool" or not key.startswith(SynthDemo.name + "/"):
            continue
        sample = by_id[trajectory.sample_id]
        stage = rng.choice(STAGES)
        wrong = str(rng.choice([v for v in range(10) if str(v) != sample.answer]))
        with_anchor = stage == "CORRECT" or rng.random() >= DIAGNOSIS_ONLY_SHARE
        reflection = scripted_reflection(sample, trajectory, stage, wrong, with_anchor)
        rows += [trajectory.to_json(), conditioned(trajectory, reflection, store).to_json()]
        counts[f"{reflection.break_point.stage}/{'anchor' if reflection.anchor else 'none'}"] += 1
    folder = root / TEACHER_DATA
    write_jsonl_atomic(folder / "trajectories.jsonl", rows)
    summary = {"rows": len(rows), **dict(sorted(counts.items()))}
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
