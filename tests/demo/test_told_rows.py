"""Demo II's teacher rows on `told` items (`beacon.demo.told_rows`), built from real episodes of
the scripted expert: the prompt the OPD teacher reads, the red-key shares that construct its
weakness, and the wrong-path rows whose prefix is context, not target."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from beacon.agent.transcript import messages_text, parse_prompt_text
from beacon.benchmarks import get_benchmark
from beacon.data.eval_stages import run_trajectories
from beacon.demo.data import sft_told_rows
from beacon.demo.expert import crop_code
from beacon.demo.told_rows import (
    TOLD_DATA,
    ToldPlan,
    attempt,
    break_point,
    build_told_rows,
    reflection,
)
from beacon.engines.tokenizer import HFTokenizer
from beacon.images import ImageStore, image_key
from beacon.train.core.encode import encode_trajectory
from beacon.train.opd.score import REFLECTION_HEADER, condition_messages, reflection_text
from beacon.types import Segment, Trajectory

from .keys_expert_run import keys_expert_run

LIMIT, SEED = 8, 5  # 8 `told` items, half with red keys
POSITION = "before_question"


@pytest.fixture(scope="module")
def items() -> list:
    return list(get_benchmark("synth_keys_told").load(limit=LIMIT, seed=SEED))


@pytest.fixture(scope="module")
def expert_run(tmp_path_factory: pytest.TempPathFactory, items: list) -> Path:
    """The scripted expert over HTTP, tool mode, on the `told` items: a real eval run."""
    out = tmp_path_factory.mktemp("told-expert")
    return keys_expert_run(items, ["synth_keys_told"], LIMIT, SEED, out)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> HFTokenizer:
    from beacon.demo.model import make_demo_model

    folder = tmp_path_factory.mktemp("model")
    make_demo_model(folder, seed=0)
    return HFTokenizer.from_pretrained(str(folder))


def build(root: Path, run: Path, items: list, plan: ToldPlan, seed: int = 1) -> list[Trajectory]:
    build_told_rows(root, [run], items, seed, POSITION, plan)
    lines = (root / TOLD_DATA / "trajectories.jsonl").read_text().splitlines()
    return [Trajectory.from_json(line) for line in lines]


def episodes(run: Path) -> dict[str, Trajectory]:
    return {d.trajectory.sample_id: d.trajectory for d in run_trajectories(run)}


def reflection_of(prompt: str, question: str) -> str:
    """The reflection block of a conditioned prompt: from its header up to the question."""
    start = prompt.index(REFLECTION_HEADER)
    return prompt[start : prompt.index("\n\n" + question, start)]


def same_pixels(store: ImageStore, key: str, image) -> bool:
    return image_key(store.get(key).convert(image.mode)) == image_key(image)


def test_conditioned_rows_are_the_expert_episode_with_the_reflection_before_the_question(
    tmp_path: Path, expert_run: Path, items: list
) -> None:
    rows = build(tmp_path, expert_run, items, ToldPlan(plain=4, conditioned=24, wrong_path=0))
    store = ImageStore(tmp_path / "sft" / "images")
    by_id, plain = {s.id: s for s in items}, episodes(expert_run)
    seen = set()
    for row in (r for r in rows if r.metadata["teacher_row"] == "conditioned"):
        sample, episode = by_id[row.sample_id], plain[row.sample_id]
        assert row.segments[1:] == episode.segments[1:]  # the target: the expert's trajectory
        prompt = row.segments[0]
        text = reflection_of(prompt.text, sample.question)
        anchored = "Anchor evidence: 2 supporting image(s)" in text
        support = prompt.images[1:]
        assert len(support) == (2 if anchored else 0)
        expected = condition_messages(
            parse_prompt_text(episode.segments[0].text),
            text,
            [store.get(k) for k in support],
            POSITION,
        )
        assert prompt.text == messages_text(expected)
        user = next(m for m in parse_prompt_text(prompt.text) if m["role"] == "user")
        kinds = [p["type"] for p in user["content"]]
        assert kinds == ["image"] * (1 + len(support)) + ["text"]
        assert user["content"][-1]["text"].startswith(REFLECTION_HEADER)
        if anchored:  # the expert's key crop and cell crop: a correct sibling's
            original, meta = sample.images[0], sample.metadata
            assert same_pixels(store, support[0], original.crop(tuple(meta["key_box"])))
            assert same_pixels(store, support[1], original.crop(tuple(meta["region"])))
            assert tuple(support) == tuple(k for s in episode.segments[2:] for k in s.images)
        stage = text.rsplit("first broken link ", 1)[-1].split(".")[0]
        if "Break point: none" not in text:  # every diagnosis names the right cell
            assert f"cell {sample.metadata['target']}" in text, text
        seen.add((sample.metadata["colour"], stage if "first broken" in text else "CORRECT"))
    assert {c for c, _ in seen} == {"red", "grey"} and {"ACQUIRE", "READ"} <= {s for _, s in seen}


def test_reflections_are_the_scripted_critics(expert_run: Path, items: list) -> None:
    """A red key mapped as a grey one is ACQUIRE, and the discrepancy names the right cell."""
    red = next(s for s in items if s.metadata["colour"] == "red")
    meta, episode = red.metadata, episodes(expert_run)[red.id]
    found = break_point(red, attempt(red, "mapping", random.Random(0)))
    k = meta["key"]
    assert (found.stage, found.discrepancy) == (
        "ACQUIRE",
        f"cropped cell {k}; the red key names cell {9 - k}",
    )
    assert break_point(red, attempt(red, "right", random.Random(0))).stage == "CORRECT"
    assert break_point(red, attempt(red, "misread", random.Random(0))).stage == "READ"
    text = reflection_text(reflection(red, episode, found, with_anchor=True))
    assert "a red key counts from the end" in text and '"colour": "red"' in text


def test_red_shares_differ_between_plain_and_conditioned_rows(
    tmp_path: Path, expert_run: Path, items: list
) -> None:
    by_id = {s.id: s for s in items}
    plan = ToldPlan(plain=100, conditioned=100, wrong_path=0, red_plain=0.02)
    rows = build(tmp_path, expert_run, items, plan)
    summary = json.loads((tmp_path / TOLD_DATA / "summary.json").read_text())
    for kind, reds in (("plain", 2), ("conditioned", 50)):
        colours = [
            by_id[r.sample_id].metadata["colour"] for r in rows if r.metadata["teacher_row"] == kind
        ]
        assert (len(colours), colours.count("red")) == (100, reds)
        assert (summary[f"{kind}/red"], summary[f"{kind}/grey"]) == (reds, 100 - reds)


@pytest.mark.parametrize(("share", "low", "high"), [(0.25, 0.15, 0.35), (0.0, 0, 0), (1.0, 1, 1)])
def test_diagnosis_only_share_of_the_wrong_attempts(
    tmp_path: Path, expert_run: Path, items: list, share: float, low: float, high: float
) -> None:
    plan = ToldPlan(plain=0, conditioned=200, wrong_path=0, diagnosis_only=share)
    build(tmp_path, expert_run, items, plan)
    summary = json.loads((tmp_path / TOLD_DATA / "summary.json").read_text())
    wrong = {
        k: v for k, v in summary.items() if k.startswith("conditioned/") and "/CORRECT/" not in k
    }
    wrong = {k: v for k, v in wrong.items() if k.endswith(("/crops", "/none"))}
    bare = sum(v for k, v in wrong.items() if k.endswith("/none"))
    assert low <= bare / sum(wrong.values()) <= high
    assert summary.get("conditioned/CORRECT/none", 0) == 0  # a right attempt's group has an anchor


def test_wrong_path_rows_train_only_on_the_answer_the_wrong_crop_shows(
    tmp_path: Path, expert_run: Path, items: list, tokenizer: HFTokenizer
) -> None:
    rows = build(tmp_path, expert_run, items, ToldPlan(plain=0, conditioned=0, wrong_path=6))
    store = ImageStore(tmp_path / "sft" / "images")
    by_id = {s.id: s for s in items}
    assert len(rows) == 6
    for row in rows:
        sample = by_id[row.sample_id]
        meta, k = sample.metadata, sample.metadata["key"]
        wrong_box = tuple(meta["cell_boxes"][k - 1])
        shown = str(meta["digits"][k - 1])
        assert meta["colour"] == "red" and shown != sample.answer
        generated = "".join(s.text for s in row.segments if s.role == "generated")
        assert f"Key: {k} red." in generated and crop_code(wrong_box) in generated
        assert crop_code(meta["region"]) not in generated
        assert generated.endswith(f"<answer>{shown}</answer>") and row.final_answer == shown
        crop = next(s for s in reversed(row.segments) if s.role == "observation").images
        assert crop == [store.put(sample.images[0].crop(wrong_box))]
        assert same_pixels(store, crop[0], sample.images[0].crop(wrong_box))
        text = reflection_of(row.segments[0].text, sample.question)
        assert f"ACQUIRE. Discrepancy: cropped cell {k}; the red key names cell {9 - k}" in text

        encoded = encode_trajectory(row, tokenizer, store.header)
        prefix = encode_trajectory(
            Trajectory(row.sample_id, row.mode, row.format, row.segments[:-1]),
            tokenizer,
            store.header,
        )
        n = len(prefix)
        assert encoded.input_ids[:n] == prefix.input_ids
        assert sum(encoded.loss_mask[:n]) == 0
        assert encoded.loss_mask[n:] == [1] * (len(encoded) - n) and len(encoded) > n
        answer = tokenizer.tokenizer.decode(encoded.input_ids[n:])
        assert answer.replace(" ", "") == f"<answer>{shown}</answer>"
        unmasked = [
            Segment(s.role, s.text, images=s.images, kind=s.kind) for s in row.segments
        ]  # the same row without the flag trains on its prefix
        plain = encode_trajectory(
            Trajectory(row.sample_id, row.mode, row.format, unmasked), tokenizer, store.header
        )
        assert sum(plain.loss_mask[:n]) > 0


def test_a_text_segment_takes_one_loss_mask_value(tokenizer: HFTokenizer) -> None:
    prompt = Segment("prompt", "user: What digit?")
    mixed = Segment("generated", "<answer>3</answer>", loss_mask=[0, 1])
    with pytest.raises(ValueError, match="one value for the whole segment"):
        encode_trajectory(Trajectory("0", "tool", "thyme", [prompt, mixed]), tokenizer)


def test_the_set_is_drawn_by_seed(tmp_path: Path, expert_run: Path, items: list) -> None:
    plan = ToldPlan(plain=10, conditioned=20, wrong_path=4)
    first = build(tmp_path / "a", expert_run, items, plan, seed=1)
    again = build(tmp_path / "b", expert_run, items, plan, seed=1)
    other = build(tmp_path / "c", expert_run, items, plan, seed=2)
    assert [r.to_json() for r in first] == [r.to_json() for r in again]
    assert [r.to_json() for r in first] != [r.to_json() for r in other]


def test_a_pool_without_red_keys_is_refused(tmp_path: Path, expert_run: Path, items: list) -> None:
    greys = [s for s in items if s.metadata["colour"] == "grey"]
    with pytest.raises(ValueError, match="no correct red-key"):
        build_told_rows(
            tmp_path, [expert_run], greys, 1, POSITION, ToldPlan(plain=0, conditioned=0)
        )


def test_plain_red_rows_can_map_the_key_as_a_grey_one(
    tmp_path: Path, expert_run: Path, items: list, tokenizer: HFTokenizer
) -> None:
    """`red_plain_mapping="grey"`: a plain red row crops cell k (not 9 - k), answers that cell's
    digit and trains on every generated token; grey rows stay the expert's."""
    plan = ToldPlan(plain=8, conditioned=0, wrong_path=0, red_plain=0.5, red_plain_mapping="grey")
    rows = build(tmp_path, expert_run, items, plan)
    store = ImageStore(tmp_path / "sft" / "images")
    by_id = {s.id: s for s in items}
    colours = [by_id[row.sample_id].metadata["colour"] for row in rows]
    assert colours.count("red") == colours.count("grey") == 4
    for row in rows:
        meta = by_id[row.sample_id].metadata
        generated = "".join(s.text for s in row.segments if s.role == "generated")
        cell = meta["key"] if meta["colour"] == "red" else meta["target"]
        assert crop_code(meta["cell_boxes"][cell - 1]) in generated
        assert row.final_answer == str(meta["digits"][cell - 1])
        encoded = encode_trajectory(row, tokenizer, store.header)
        generated_ids = sum(len(s.text) > 0 for s in row.segments if s.role == "generated")
        assert generated_ids >= 3 and sum(encoded.loss_mask) > 20  # the prefix is a target too
    with pytest.raises(ValueError, match="red_plain_mapping"):
        ToldPlan(red_plain_mapping="blue")


def test_the_cold_starts_told_rows_note_a_red_key_and_map_it_as_a_grey_one(
    tmp_path: Path, expert_run: Path, items: list, tokenizer: HFTokenizer
) -> None:
    """The SFT set's `told` rows (`beacon.demo.data.sft_told_rows`): the expert's episodes, except
    that a red key is noted red and then mapped as a grey one (cell k cropped, its digit
    answered), every generated token a target: the weakness every model of the demo starts
    with."""
    store = ImageStore(tmp_path / "images")
    rows = sft_told_rows(expert_run, items, store)
    by_id = {s.id: s for s in items}
    assert sorted(r.sample_id for r in rows) == sorted(by_id)  # the expert is right on each
    reds = 0
    for row in rows:
        meta = by_id[row.sample_id].metadata
        red = meta["colour"] == "red"
        reds += red
        generated = "".join(s.text for s in row.segments if s.role == "generated")
        cell = meta["key"] if red else meta["target"]
        assert (f"Key: {meta['key']} red." in generated) == red
        assert crop_code(meta["cell_boxes"][cell - 1]) in generated
        assert row.final_answer == str(meta["digits"][cell - 1])
        assert row.metadata["told_red_as_grey"] == red
        assert row.metadata["source"] == "scripted_expert"
        assert sum(encode_trajectory(row, tokenizer, store.header).loss_mask) > 20
    assert reds == LIMIT // 2
