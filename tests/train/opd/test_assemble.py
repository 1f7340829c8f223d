"""CheckAndAssemble (Algorithm 4): anchor selection (Eq. 13-14), validation, reconciliation."""

from __future__ import annotations

from dataclasses import replace

import pytest

from beacon.train.opd.assemble import anchor_cost, check_and_assemble
from beacon.train.opd.critic_schema import observed_states

from .helpers import critic_output, make_trajectory


@pytest.fixture
def group():
    """R1 correct (two calls), R2 wrong (one call), R3 wrong (no call)."""
    trajs = [
        make_trajectory([["k1"], ["k2"]], code_tokens=10),
        make_trajectory([["k3"]], code_tokens=8, answer="B"),
        make_trajectory([], answer="C"),
    ]
    states = observed_states(trajs)
    shown = frozenset(states.image_keys)
    return states, [True, False, False], shown


def anchors(assembly) -> list[str | None]:
    return [
        None if r is None or r.anchor is None else r.anchor.state.state_id
        for r in assembly.reflections
    ]


def test_own_state_first_then_group_reference(group) -> None:
    states, labels, shown = group
    out = critic_output(
        {"R1_S1": ["R1_S1_IMG1"], "R1_S2": ["R1_S2_IMG1"], "R2_S1": ["R2_S1_IMG1"]},
        ["CORRECT", "READ", "ACQUIRE"],
    )
    a = check_and_assemble(out, states, labels, shown)
    assert a.status == "complete" and a.problems == []
    # R1: own states, R1_S1 has fewer tool rounds; R2: its own state although C+ is cheaper;
    # R3: no own state -> C+ = R1's states -> R1_S1
    assert anchors(a) == ["R1_S1", "R2_S1", "R1_S1"]
    assert a.reflections[1].break_point.stage == "READ"
    assert a.reflections[1].anchor.support_image_keys == ("k3",)


def test_original_state_is_cheapest_and_adds_no_image(group) -> None:
    states, labels, shown = group
    out = critic_output(
        {"ORIGINAL_STATE": ["ORIGINAL_IMAGE"], "R1_S1": ["R1_S1_IMG1"]},
        ["CORRECT", "READ", "READ"],
    )
    a = check_and_assemble(out, states, labels, shown)
    assert anchors(a) == ["R1_S1", "ORIGINAL_STATE", "ORIGINAL_STATE"]
    assert a.reflections[2].anchor.support_image_keys == ()


def test_cost_ties_fall_to_support_size_then_state_id() -> None:
    trajs = [make_trajectory([["k1"]]), make_trajectory([["k2", "k3"]]), make_trajectory([["k4"]])]
    states = observed_states(trajs)
    labels = [True, True, False]
    shown = frozenset(states.image_keys)
    # R1_S1 and R2_S1 cost (1, 10, .): R2_S1 needs two images -> R1_S1 wins for R3
    out = critic_output(
        {"R2_S1": ["R2_S1_IMG1", "R2_S1_IMG2"], "R1_S1": ["R1_S1_IMG1"]},
        ["CORRECT", "CORRECT", "ACQUIRE"],
    )
    assert anchors(check_and_assemble(out, states, labels, shown))[2] == "R1_S1"
    # equal support sizes -> the smaller state id (R1_S1, index 1) wins
    out = critic_output(
        {"R2_S1": ["R2_S1_IMG2"], "R1_S1": ["R1_S1_IMG1"]}, ["CORRECT", "CORRECT", "ACQUIRE"]
    )
    assert anchors(check_and_assemble(out, states, labels, shown))[2] == "R1_S1"
    s1, s2 = states.get("R1_S1"), states.get("R2_S1")
    assert anchor_cost(s1, ["a"]) < anchor_cost(s2, ["a"]) < anchor_cost(s1, ["a", "b"])


def test_n_code_breaks_equal_tool_rounds() -> None:
    trajs = [make_trajectory([["k1"]], code_tokens=30), make_trajectory([["k2"]], code_tokens=5)]
    trajs.append(make_trajectory([], answer="C"))
    states = observed_states(trajs)
    out = critic_output(
        {"R1_S1": ["R1_S1_IMG1"], "R2_S1": ["R2_S1_IMG1"]}, ["CORRECT", "CORRECT", "ACQUIRE"]
    )
    a = check_and_assemble(out, states, [True, True, False], frozenset(states.image_keys))
    assert anchors(a)[2] == "R2_S1"


def test_no_group_reference_means_no_reflection(group) -> None:
    states, labels, shown = group
    out = critic_output({"R2_S1": ["R2_S1_IMG1"]}, ["CORRECT", "READ", "ACQUIRE"])
    a = check_and_assemble(out, states, labels, shown)
    assert a.status == "no_reference" and a.reflections == [None, None, None]


def test_all_wrong_gives_diagnosis_only() -> None:
    trajs = [make_trajectory([["k1"]], answer="B"), make_trajectory([], answer="C")]
    states = observed_states(trajs)
    out = critic_output({"ORIGINAL_STATE": ["ORIGINAL_IMAGE"]}, ["READ", "GROUND"])
    a = check_and_assemble(out, states, [False, False], frozenset(states.image_keys))
    assert a.status == "diagnosis_only"
    assert [r.anchor for r in a.reflections] == [None, None]
    assert [r.break_point.stage for r in a.reflections] == ["READ", "GROUND"]
    empty = critic_output({}, ["ACQUIRE", "OTHER"])  # no sufficient state is allowed here
    assert check_and_assemble(empty, states, [False, False], frozenset()).status == "diagnosis_only"


def test_all_correct_group(group) -> None:
    states, _, shown = group
    out = critic_output({"R1_S1": ["R1_S1_IMG1"]}, ["CORRECT"] * 3)
    a = check_and_assemble(out, states, [True, True, True], shown)
    assert a.status == "complete"
    assert [r.break_point.stage for r in a.reflections] == ["CORRECT"] * 3


def test_missing_and_inapplicable(group) -> None:
    states, labels, shown = group
    assert check_and_assemble(None, states, labels, shown).status == "missing"
    out = critic_output({"R1_S1": ["R1_S1_IMG1"]}, ["CORRECT", "READ", "ACQUIRE"], applicable=False)
    a = check_and_assemble(out, states, labels, shown)
    assert a.status == "inapplicable" and a.reflections == [None] * 3


def test_mixed_group_reconciles_and_keeps_discrepancy(group) -> None:
    states, labels, shown = group
    out = critic_output(
        {"R1_S1": ["R1_S1_IMG1"], "R2_S1": ["R2_S1_IMG1"]},
        ["GROUND", "ACQUIRE", "READ"],  # R1 is correct; R2 owns a sufficient state; R3 sees none
        ["d1", "d2", "d3"],
    )
    a = check_and_assemble(out, states, labels, shown)
    assert a.status == "complete" and a.reconciled == 3
    assert [(d.stage, d.discrepancy) for d in a.diagnoses] == [
        ("CORRECT", "d1"),
        ("READ", "d2"),
        ("ACQUIRE", "d3"),
    ]


SUFF = {"R1_S1": ["R1_S1_IMG1"]}
MIXED_OK = ["CORRECT", "ACQUIRE", "ACQUIRE"]


@pytest.mark.parametrize(
    ("sufficient", "stages", "labels", "match"),
    [
        ({"R9_S1": ["R9_S1_IMG1"]}, MIXED_OK, None, "unknown state id"),
        ({"R1_S1": ["R7_S1_IMG1"]}, MIXED_OK, None, "not available"),
        ({"R1_S1": ["R1_S2_IMG1"]}, MIXED_OK, None, "not available"),  # a later call's image
        ({"R1_S1": []}, MIXED_OK, None, "empty support"),
        ({"R1_S1": ["R1_S1_IMG1"], "ORIGINAL_STATE": ["R1_S1_IMG1"]}, MIXED_OK, None, "not avail"),
        (SUFF, ["CORRECT", "ACQUIRE"], None, "exactly one"),  # a diagnosis missing
        (SUFF, [*MIXED_OK, "OTHER"], None, "exactly one"),  # an unknown rollout R4
        (SUFF, ["READ", "READ", "READ"], [True] * 3, "contradicts"),  # all-correct, not CORRECT
        (SUFF, ["CORRECT", "CORRECT", "ACQUIRE"], [False] * 3, "contradicts"),  # all-wrong CORRECT
        (SUFF, ["ACQUIRE", "ACQUIRE", "READ"], [False] * 3, "without a sufficient state"),
        (SUFF, ["READ", "ACQUIRE", "ACQUIRE"], [False] * 3, None),  # valid: the control case
    ],
)
def test_invalid_outputs_are_rejected(group, sufficient, stages, labels, match) -> None:
    states, mixed_labels, shown = group
    out = critic_output(sufficient, stages)
    a = check_and_assemble(out, states, labels or mixed_labels, shown)
    if match is None:
        assert a.status == "diagnosis_only"
        return
    assert a.status == "invalid" and a.reflections == [None] * 3
    assert any(match in p for p in a.problems), a.problems


def test_duplicate_diagnosis_and_nonempty_discrepancy_rejected(group) -> None:
    states, _, shown = group
    out = critic_output(SUFF, ["CORRECT"] * 3)
    dup = replace(out, rollout_diagnoses=out.rollout_diagnoses[:2] + out.rollout_diagnoses[:1])
    assert check_and_assemble(dup, states, [True] * 3, shown).status == "invalid"
    chatty = critic_output(SUFF, ["CORRECT"] * 3, ["", "looks fine", ""])
    a = check_and_assemble(chatty, states, [True] * 3, shown)
    assert a.status == "invalid" and "empty discrepancy" in a.problems[0]


def test_image_not_shown_to_the_critic_is_rejected(group) -> None:
    states, labels, _ = group
    out = critic_output(SUFF, MIXED_OK)
    a = check_and_assemble(out, states, labels, frozenset({"ORIGINAL_IMAGE"}))
    assert a.status == "invalid" and "not shown" in a.problems[0]


def test_acquire_is_about_owned_states_read_about_seen_ones() -> None:
    # all wrong; only the original is sufficient: R1's crop missed (ACQUIRE is fine, it owns
    # no sufficient state), R2 never called a tool but misread the original (READ is fine)
    trajs = [make_trajectory([["k1"]], answer="B"), make_trajectory([], answer="C")]
    states = observed_states(trajs)
    shown = frozenset(states.image_keys)
    out = critic_output({"ORIGINAL_STATE": ["ORIGINAL_IMAGE"]}, ["ACQUIRE", "READ"])
    assert check_and_assemble(out, states, [False, False], shown).status == "diagnosis_only"
    owned = critic_output({"R1_S1": ["R1_S1_IMG1"]}, ["ACQUIRE", "OTHER"])
    a = check_and_assemble(owned, states, [False, False], shown)
    assert a.status == "invalid" and "owns a sufficient state" in a.problems[0]


def test_mixed_reconciliation_with_only_the_original_sufficient() -> None:
    trajs = [make_trajectory([]), make_trajectory([["k1"]], answer="B"), make_trajectory([], "C")]
    states = observed_states(trajs)
    out = critic_output(
        {"ORIGINAL_STATE": ["ORIGINAL_IMAGE"]}, ["CORRECT", "ACQUIRE", "CORRECT"], ["", "a", "b"]
    )
    a = check_and_assemble(out, states, [True, False, False], frozenset(states.image_keys))
    # R2 keeps ACQUIRE (owns nothing sufficient); R3, wrongly CORRECT, sees the original -> READ
    assert [d.stage for d in a.diagnoses] == ["CORRECT", "ACQUIRE", "READ"]
    assert a.status == "complete" and a.reconciled == 1
    assert [r.anchor.state.state_id for r in a.reflections] == ["ORIGINAL_STATE"] * 3
