"""The scripted critic's region rules: a crop is sufficient when it holds the evidence region."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from beacon.benchmarks.synth_demo import coords, generate
from beacon.train.opd.assemble import check_and_assemble
from beacon.train.opd.critic import HttpCritic, build_critic_request
from beacon.train.opd.critic_schema import observed_states, parse_critic_output
from beacon.train.opd.scripted_critic import ScriptedCritic, first_image, request_text, task_fields

from .helpers import labels, make_trajectory


def rollout(box: tuple[int, ...] | None, answer: str, key: str):
    """One crop at `box` (its image stored under `key`), or no call when `box` is None."""
    traj = make_trajectory([[key]] if box else [], answer=answer)
    for segment in traj.segments:
        if segment.kind == "code":
            segment.text = f"image.crop({coords(box)}).show()</code>"
    return traj


def ask(sample, trajectories):
    correct = labels(trajectories, sample)
    states = observed_states(trajectories)

    def load(key: str) -> Image.Image:
        return sample.images[0] if key == "k_orig" else Image.new("RGB", (8, 8))

    request = build_critic_request(
        sample.question, sample.answer, trajectories, correct, states, load
    )
    messages = HttpCritic("http://unused/v1", "scripted-critic").request_body(request)["messages"]
    answer = ScriptedCritic([sample]).answer(request_text(messages), first_image(messages))
    output = parse_critic_output(json.dumps(answer))
    return check_and_assemble(output, states, correct, request.shown_image_ids), output


def wrong(answer: str) -> str:
    return str((int(answer) + 1) % 10)


def test_hard_item_crops_holding_the_region_are_the_sufficient_states() -> None:
    sample = generate(0, 2)  # tiny: unreadable at full view
    assert sample.metadata["difficulty"] == "hard"
    region = tuple(sample.metadata["region"])
    around = (max(0, region[0] - 4), max(0, region[1] - 4), region[2] + 4, region[3] + 4)
    elsewhere = (0, 0, 10, 10) if region[0] > 20 else (430, 430, 447, 447)
    group = [
        rollout(around, sample.answer, "k1"),
        rollout(around, wrong(sample.answer), "k2"),
        rollout(elsewhere, wrong(sample.answer), "k3"),
        rollout(None, wrong(sample.answer), "k4"),
    ]
    assembly, output = ask(sample, group)
    assert {s.state_id for s in output.sufficient_states} == {"R1_S1", "R2_S1"}
    assert assembly.status == "complete"
    assert [r.break_point.stage for r in assembly.reflections] == [
        "CORRECT",
        "READ",
        "ACQUIRE",
        "ACQUIRE",
    ]
    assert all(r.anchor.state.state_id != "ORIGINAL_STATE" for r in assembly.reflections)


def test_easy_item_full_view_suffices_and_wrong_answers_are_misreadings() -> None:
    sample = generate(0, 0)  # large: readable at full view
    group = [rollout(None, sample.answer, "k1"), rollout(None, wrong(sample.answer), "k2")]
    assembly, output = ask(sample, group)
    assert [s.state_id for s in output.sufficient_states] == ["ORIGINAL_STATE"]
    assert [r.break_point.stage for r in assembly.reflections] == ["CORRECT", "READ"]


def test_task_fields_read_the_first_question_and_its_reference() -> None:
    text = "Task\nQuestion: How many?\nReference answer: 7\nmore\nQuestion: again"
    assert task_fields(text) == ("How many?", "7")
    assert task_fields("Question: a\nb\nReference answer: 3") == ("a\nb", "3")
    assert task_fields("Question: no reference here") == ("", "")


@pytest.mark.timeout(20)
def test_a_megabyte_of_questions_without_a_reference_is_read_in_one_pass() -> None:
    """The old regex rescanned the rest of the text from each of the 100,000 "Question: ": hours
    on this message (33 s at 195 KB); two string searches read it once."""
    text = "Question: " * 100_000
    answer = ScriptedCritic().answer(text)
    assert answer["reading"]["query_slot"] == "" and answer["rollout_diagnoses"] == []
