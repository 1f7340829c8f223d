"""ObservedStates (Algorithm 3) from Trajectory records, and group verification (Algorithm 2)."""

from __future__ import annotations

import pytest

from beacon.engines.base import GenerationResult
from beacon.train.opd.critic_schema import group_kind, observed_states
from beacon.types import Sample
from beacon.verify import Judge

from .helpers import labels, make_trajectory


def test_states_follow_algorithm_3() -> None:
    group = [
        make_trajectory([["k_a"], ["k_b", "k_c"]], code_tokens=7),
        make_trajectory([]),
        make_trajectory([["k_a"]], code_tokens=5),
    ]
    states = observed_states(group)
    ids = [s.state_id for s in states.states]
    assert ids == ["ORIGINAL_STATE", "R1_S1", "R1_S2", "R3_S1"]
    orig, r1s1, r1s2, r3s1 = states.states
    assert (orig.owner, orig.n_tool, orig.n_code, orig.index) == (None, 0, 0, 0)
    assert orig.image_ids == ("ORIGINAL_IMAGE",)
    assert (r1s1.owner, r1s1.n_tool, r1s1.n_code) == (0, 1, 7)
    assert r1s2.image_ids == ("ORIGINAL_IMAGE", "R1_S1_IMG1", "R1_S2_IMG1", "R1_S2_IMG2")
    assert r1s2.new_image_ids == ("R1_S2_IMG1", "R1_S2_IMG2")  # one call, one state
    assert (r1s2.n_tool, r1s2.n_code, r1s2.index) == (2, 14, 2)
    assert (r3s1.owner, r3s1.image_ids) == (2, ("ORIGINAL_IMAGE", "R3_S1_IMG1"))
    assert states.image_keys["R1_S2_IMG2"] == "k_c"
    assert states.image_keys["R3_S1_IMG1"] == "k_a"  # same pixels, separate ids per state
    assert [s.state_id for s in states.owned_by(0)] == ["R1_S1", "R1_S2"]


def test_multi_image_samples_name_every_original() -> None:
    states = observed_states([make_trajectory([], original=("k1", "k2"))])
    assert states.original.image_ids == ("ORIGINAL_IMAGE", "ORIGINAL_IMAGE_2")


def test_group_kind() -> None:
    assert group_kind([True, True]) == "all_correct"
    assert group_kind([True, False]) == "mixed"
    assert group_kind([False, False]) == "all_wrong"
    with pytest.raises(ValueError, match="group_size"):
        group_kind([])


class FakeJudgeEngine:
    name, tokenizer = "fake", None

    def __init__(self, reply: str, error: bool = False) -> None:
        self.reply, self.error, self.calls = reply, error, 0

    def generate(self, requests):
        self.calls += 1
        if self.error:
            return [GenerationResult("", finish_reason="error", error="down")]
        return [GenerationResult(self.reply)]

    def close(self) -> None:
        pass


def test_group_labels_are_the_benchmark_verdicts_then_the_judge(tmp_path) -> None:
    sample = Sample(id="s1", images=[], question="How many?", answer="4", answer_type="number")
    group = [make_trajectory([], answer=a) for a in ("4", "5", None, "  ")]
    correct = labels(group, sample)
    assert correct == [True, False, False, False]  # missing / empty answer -> wrong
    assert group_kind(correct) == "mixed"

    text = Sample(id="s2", images=[], question="Color?", answer="red", answer_type="text")
    engine = FakeJudgeEngine("CORRECT")
    judge = Judge(engine, "fake", tmp_path)
    assert labels([make_trajectory([], answer="crimson")], text, judge) == [True]
    assert engine.calls == 1
    down = Judge(FakeJudgeEngine("", error=True), "down", tmp_path / "d")
    assert labels([make_trajectory([], answer="crimson")], text, down) == [False]
