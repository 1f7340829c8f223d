"""The demo's ReVuE teacher learns to read a reflection before it teaches with one.

ReVuE's teacher scores the student's rollout with the critic's reflection R_i (and its support
images) in its prompt (`beacon.train.opd.score`). The paper's teachers are large
instruction-tuned VLMs that can read such text; the demo's 1.3M-parameter teacher never saw any.
So before OPD the teacher (the best RL run) is fine-tuned on the expert's tool-mode trajectories,
each twice: as it is, and with the reflection the scripted critic would give a rollout of its
item, placed where the OPD teacher reads it (`revue.position`, through the same
`condition_messages`), so the teacher learns the prompts it will see.

What the reflection says must not be a shortcut to the target's own action, or the teacher
learns to echo the student's decision instead of reading the evidence:

- the anchor is the group's sufficient view, not the target's: on a hard item the crop of the
  box a correct sibling made (support: that crop), on an easy item the original image or, as
  often, such a crop, whether or not the target itself crops;
- the break point is drawn per row: CORRECT, or READ / ACQUIRE with a wrong answer, a quarter
  of the latter without an anchor (the diagnosis-only reflections of all-wrong groups); the
  target is always the expert's correct trajectory;
- the reflection carries no coordinates: the scripted critic's query slot is the question
  without its box, and an item's facts are its digits.

Every OPD variant (vanilla included) distils from this teacher, so they differ only in the
teacher's context and the token weights; OPD's teacher check measures whether the reflection
helps it (`beacon.train.opd.probe`).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from pathlib import Path

from beacon.agent.transcript import messages_text, parse_prompt_text
from beacon.benchmarks.synth_demo import SynthDemo
from beacon.data.records import SFT_FILE, write_training_set
from beacon.demo.expert import crop_box
from beacon.images import ImageStore
from beacon.train.opd.assemble import Anchor, BreakPoint, Reflection
from beacon.train.opd.critic_schema import Grounding, ObservedState, Reading
from beacon.train.opd.score import condition_messages, reflection_text
from beacon.train.opd.scripted_critic import GROUNDING, diagnosis, reading
from beacon.train.sft import read_trajectories
from beacon.types import Sample, Trajectory

TEACHER_DATA = "teacher-data"
ORIGINAL_STATE = ObservedState(0, "ORIGINAL_STATE", None, ("ORIGINAL_IMAGE",), (), 0, 0)
STAGES = ("CORRECT", "READ", "ACQUIRE")
DIAGNOSIS_ONLY_SHARE = 0.25
"""Of the rows with a wrong-answer break point, the share without an anchor (all-wrong groups)."""
CROP_ANCHOR_SHARE_EASY = 0.5
"""Of the easy items' anchors, the share that is a sibling's crop instead of the original."""


def anchor_view(sample: Sample, store: ImageStore, rng: random.Random) -> str | None:
    """The anchor's support image: the crop a correct sibling made of the item (the expert's
    crop box), stored in `store`; None for the original image (easy items, half the time)."""
    easy = sample.metadata["difficulty"] == "easy"
    if easy and rng.random() >= CROP_ANCHOR_SHARE_EASY:
        return None
    return store.put(sample.images[0].crop(tuple(crop_box(sample))))


def sibling_anchor(sample: Sample, views: tuple[str, ...], rule: str) -> Anchor:
    """The anchor a group's sufficient state gives: the crops `views` (image keys, call order)
    a correct sibling made, or the original image when there are none; the scripted critic's
    reading of `sample` and the grounding `rule`."""
    state, ids = ORIGINAL_STATE, ("ORIGINAL_IMAGE",)
    if views:
        ids = tuple(f"R1_S{n}_IMG1" for n in range(1, len(views) + 1))
        state = ObservedState(
            len(ids), f"R1_S{len(ids)}", 0, ("ORIGINAL_IMAGE", *ids), ids[-1:], len(ids), len(ids)
        )
    read = reading(sample.question, sample.answer, sample.metadata.get("facts"))
    return Anchor(state, ids, views, Reading(**read), Grounding(rule))


def scripted_reflection(
    sample: Sample, view: str | None, stage: str, wrong: str, with_anchor: bool
) -> Reflection:
    """The reflection the scripted critic would give a rollout of `sample` whose group's
    sufficient view is `view` (a crop's image key, or None: the original image)."""
    views = () if view is None else (view,)
    anchor = sibling_anchor(sample, views, GROUNDING["rule"]) if with_anchor else None
    label = "CORRECT" if stage == "CORRECT" else "INCORRECT"
    found = diagnosis("R1", label, f"Final answer: {wrong}", sample.answer, stage == "READ")
    return Reflection(anchor, BreakPoint(found["stage"], found["discrepancy"]))


def conditioned(
    trajectory: Trajectory, reflection: Reflection, store: ImageStore, position: str
) -> Trajectory:
    """A copy of the text trajectory with `reflection` and its support images in the prompt,
    placed by `condition_messages` at `position`, as in the OPD teacher's prompt."""
    prompt = trajectory.segments[0]
    keys = list(reflection.anchor.support_image_keys) if reflection.anchor else []
    messages = condition_messages(
        parse_prompt_text(prompt.text),
        reflection_text(reflection),
        [store.get(key) for key in keys],
        position,
    )
    segment = replace(prompt, text=messages_text(messages), images=[*prompt.images, *keys])
    return replace(trajectory, segments=[segment, *trajectory.segments[1:]])


def build_teacher_set(
    root: Path, samples: list[Sample], seed: int, position: str
) -> dict[str, int]:
    """`root/teacher-data/trajectories.jsonl`: each tool-mode expert row of `root/sft/` on one
    of `samples` as it is and with a reflection (images in `root/sft/images`); returns counts
    by break point and anchor."""
    by_id = {s.id: s for s in samples}
    store = ImageStore(root / "sft" / "images")
    rng = random.Random(f"demo-teacher:{seed}")
    rows, counts = [], Counter[str]()
    for trajectory in read_trajectories([str(root / "sft" / SFT_FILE)]):
        key = trajectory.metadata.get("eval_key", "")
        if trajectory.mode != "tool" or not key.startswith(SynthDemo.name + "/"):
            continue
        sample = by_id[trajectory.sample_id]
        stage = rng.choice(STAGES)
        wrong = str(rng.choice([v for v in range(10) if str(v) != sample.answer]))
        with_anchor = stage == "CORRECT" or rng.random() >= DIAGNOSIS_ONLY_SHARE
        view = anchor_view(sample, store, rng)
        reflection = scripted_reflection(sample, view, stage, wrong, with_anchor)
        rows += [
            trajectory.to_json(),
            conditioned(trajectory, reflection, store, position).to_json(),
        ]
        anchor = "none" if reflection.anchor is None else ("crop" if view else "original")
        counts[f"{reflection.break_point.stage}/{anchor}"] += 1
    return write_training_set(root / TEACHER_DATA, rows, counts)
