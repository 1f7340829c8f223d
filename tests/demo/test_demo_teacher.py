"""The demo teacher's reflection rows: the prompt the OPD teacher will see, token for token."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from beacon.agent.formats import THYME
from beacon.agent.prompts import first_turn
from beacon.agent.transcript import messages_text
from beacon.benchmarks.synth_demo import generate
from beacon.demo.expert import crop_box, crop_code
from beacon.demo.teacher_data import (
    TEACHER_DATA,
    anchor_view,
    build_teacher_set,
    conditioned,
    scripted_reflection,
)
from beacon.engines.tokenizer import HFTokenizer
from beacon.images import ImageStore
from beacon.sandbox.inputs import PIL_INPUT_EXT
from beacon.sandbox.sandbox import jailed_input_path
from beacon.train.core.encode import encode_trajectory
from beacon.train.opd.score import condition_messages, reflection_text
from beacon.types import Segment, Trajectory

PATHS = [jailed_input_path(0, PIL_INPUT_EXT)]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> HFTokenizer:
    from beacon.demo.model import make_demo_model

    folder = tmp_path_factory.mktemp("model")
    make_demo_model(folder, seed=0)
    return HFTokenizer.from_pretrained(str(folder))


def expert_row(index: int, store: ImageStore, crop: bool, mode: str = "tool") -> Trajectory:
    """A text trajectory shaped like the scripted expert's: crop, observation, answer."""
    sample = generate(1, index)
    image = sample.images[0]
    messages = first_turn(sample.question, [image], fmt=THYME, tools=True, image_paths=PATHS)
    prompt = Segment(role="prompt", text=messages_text(messages), images=[store.put(image)])
    answer = Segment(role="generated", text=f"<answer>{sample.answer}</answer>", loss_mask=[1])
    segments = [prompt, answer]
    if crop:
        view = image.crop(tuple(crop_box(sample)))
        call = f"<code>\n```python\n{crop_code(crop_box(sample))}\n```\n</code>"
        segments = [
            prompt,
            Segment(role="generated", text=call, loss_mask=[1]),
            Segment(role="observation", text="<image>", images=[store.put(view)]),
            answer,
        ]
    return Trajectory(
        sample_id=sample.id,
        mode=mode,
        format="thyme",
        segments=segments,
        metadata={"eval_key": f"synth_demo/{sample.id}/{mode}/0"},
    )


def test_reflection_follows_the_scripted_critic(tmp_path: Path) -> None:
    store = ImageStore(tmp_path)
    tiny, large = generate(1, 2), generate(1, 0)
    assert (tiny.metadata["category"], large.metadata["category"]) == ("tiny", "large")
    view = store.put(tiny.images[0].crop(tuple(crop_box(tiny))))
    r = scripted_reflection(tiny, view, "READ", "4", with_anchor=True)
    assert r.anchor is not None and r.anchor.support_image_keys == (view,)
    assert r.anchor.reading.observed_value == tiny.answer
    assert (r.break_point.stage, r.break_point.discrepancy) == (
        "READ",
        f"answered '4' although its evidence shows {tiny.answer!r}",
    )
    r = scripted_reflection(large, None, "CORRECT", "4", with_anchor=True)
    assert r.anchor is not None and r.anchor.support_image_keys == ()  # the original suffices
    assert (r.break_point.stage, r.break_point.discrepancy) == ("CORRECT", "")
    r = scripted_reflection(large, None, "ACQUIRE", "4", with_anchor=False)
    assert r.anchor is None and r.break_point.stage == "ACQUIRE"


def test_anchors_do_not_depend_on_the_targets_own_action(tmp_path: Path) -> None:
    """A hard item's anchor is always a crop of its box; an easy item's is the original or a
    crop, drawn by the item's draw and never by whether the target trajectory crops."""
    store = ImageStore(tmp_path)
    rng = random.Random(0)
    easy = [anchor_view(generate(1, i), store, rng) for i in range(0, 400, 4)]
    assert 0.35 < sum(view is not None for view in easy) / len(easy) < 0.65
    for index in (2, 3):  # tiny, search: a crop of the expert's box, every time
        sample = generate(1, index)
        expected = store.put(sample.images[0].crop(tuple(crop_box(sample))))
        assert all(anchor_view(sample, store, rng) == expected for _ in range(5))


def test_reflections_hold_no_coordinates(tmp_path: Path) -> None:
    store = ImageStore(tmp_path)
    for index in range(8):
        sample = generate(1, index)
        for view in (None, store.put(sample.images[0].crop(tuple(crop_box(sample))))):
            text = reflection_text(scripted_reflection(sample, view, "READ", "4", True))
            assert not re.search(r"\d\s*,\s*\d", text) and "glyph" not in text, text


@pytest.mark.parametrize("stage", ["CORRECT", "ACQUIRE", "READ"])
@pytest.mark.parametrize("category", [0, 2])  # large (original suffices), tiny (crop)
def test_reflections_are_phrases_and_values(tokenizer, tmp_path: Path, stage, category) -> None:
    """A reflection's fixed text is the demo tokenizer's phrases: one token per character is
    left only for the values (digits)."""
    store = ImageStore(tmp_path)
    sample = generate(1, category)
    for view in (None, store.put(sample.images[0].crop(tuple(crop_box(sample))))):
        for anchor in (True, False):
            r = scripted_reflection(sample, view, stage, "4", with_anchor=anchor)
            ids = tokenizer.encode(reflection_text(r), [])
            pieces = [tokenizer.tokenizer.decode([i]) for i in ids]
            assert not [p for p in pieces if p.isalpha() and len(p) == 1], pieces


@pytest.mark.parametrize("position", ["end", "before_question"])
def test_conditioned_row_encodes_to_the_opd_teachers_prompt(
    tmp_path: Path, tokenizer, position: str
) -> None:
    store = ImageStore(tmp_path)
    sample = generate(1, 2)
    row = expert_row(2, store, crop=True)
    view = row.segments[2].images[0]
    reflection = scripted_reflection(sample, view, "READ", "4", with_anchor=True)
    encoded = encode_trajectory(conditioned(row, reflection, store, position), tokenizer, store.get)

    # What `beacon.train.opd.score.conditioned_sequence` renders for the teacher.
    crop = store.get(view)
    messages = first_turn(sample.question, sample.images, fmt=THYME, tools=True, image_paths=PATHS)
    teacher = condition_messages(messages, reflection_text(reflection), [crop], position)
    rendered = tokenizer.render_chat(teacher, add_generation_prompt=True)
    prompt_ids = tokenizer.encode(rendered, [sample.images[0], crop])
    assert encoded.input_ids[: len(prompt_ids)] == prompt_ids
    assert sum(encoded.loss_mask[: len(prompt_ids)]) == 0
    plain = encode_trajectory(row, tokenizer, store.get)
    completion = len(plain) - plain.loss_mask.index(1)
    assert encoded.input_ids[-completion:] == plain.input_ids[-completion:]
    assert encoded.loss_mask[-completion:] == plain.loss_mask[-completion:]
    assert encoded.images == [row.segments[0].images[0], view, view]  # support, then observation
    if position == "before_question":  # the question ends the prompt, as without a reflection
        question_end = rendered.index(sample.question) + len(sample.question)
        assert "Reflection" not in rendered[question_end:]


def test_teacher_set_doubles_the_tool_rows_of_training_items(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "sft" / "images")
    rows = [expert_row(i, store, crop=i % 4 >= 2 or i % 3 == 0) for i in range(12)]
    rows.append(expert_row(0, store, crop=False, mode="notool"))
    hinted = expert_row(3, store, crop=True)
    hinted.metadata = {"eval_key": "synth_demo_hinted/3/tool/0"}
    rows.append(hinted)
    (tmp_path / "sft" / "trajectories.jsonl").write_text("".join(r.to_json() + "\n" for r in rows))

    samples = [generate(1, i) for i in range(12)]
    summary = build_teacher_set(tmp_path, samples, seed=1, position="before_question")
    out = [json.loads(line) for line in (tmp_path / TEACHER_DATA / "trajectories.jsonl").open()]
    assert summary["rows"] == len(out) == 24
    assert sum(v for k, v in summary.items() if k != "rows") == 12
    for i, (plain, with_reflection) in enumerate(zip(out[::2], out[1::2], strict=True)):
        assert plain == json.loads(rows[i].to_json())
        text = with_reflection["segments"][0]["text"]
        assert "Reflection on visual evidence" in text and "Break point:" in text
        assert with_reflection["segments"][1:] == plain["segments"][1:]
    again = build_teacher_set(tmp_path, samples, seed=1, position="before_question")
    assert again == summary  # drawn per seed: a rebuilt set is the same set
