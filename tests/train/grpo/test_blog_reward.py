"""The blog's α/β/γ reward (seed 001): every branch, in the blog's order."""

from __future__ import annotations

import pytest

from beacon.train.core.outcomes import GroupOutcomes
from beacon.train.grpo.config import RLConfig
from beacon.train.grpo.rewards import blog_reward, get_reward

# (correct, used_tool, label, expected) with α = β = 0.5, γ = 0.2
CASES = [
    (True, False, "easy", 1.5),  # easy ∧ no tool ∧ correct: +α
    (True, True, "hard", 1.5),  # hard ∧ tool ∧ correct: +β
    (True, True, "easy", 0.8),  # easy ∧ tool, correct: -γ
    (False, True, "easy", -1.2),  # easy ∧ tool, wrong: -γ too
    (False, False, "easy", -1.0),  # otherwise: base
    (True, False, "hard", 1.0),
    (False, True, "hard", -1.0),
    (False, False, "hard", -1.0),
]


@pytest.mark.parametrize(("correct", "used_tool", "label", "expected"), CASES)
def test_blog_branches(correct: bool, used_tool: bool, label: str, expected: float) -> None:
    assert blog_reward(correct, used_tool, label) == pytest.approx(expected, abs=1e-12)


def test_blog_coefficients_are_used() -> None:
    assert blog_reward(True, False, "easy", alpha=0.3) == pytest.approx(1.3)
    assert blog_reward(True, True, "hard", beta=0.7) == pytest.approx(1.7)
    assert blog_reward(False, True, "easy", gamma=0.4) == pytest.approx(-1.4)


def test_registered_blog_mixes_the_format_term() -> None:
    group = GroupOutcomes.of([True, True], [False, True], [True, False], label="easy")
    # 0.1·R_format + 0.9·R_blog: [0.1 + 0.9·1.5, 0 + 0.9·0.8]
    assert get_reward("blog")(group, RLConfig()) == pytest.approx([1.45, 0.72], abs=1e-12)
    verbatim = RLConfig(format_weight=0.0, blog={"gamma": 0.3})
    assert get_reward("blog")(group, verbatim) == pytest.approx([1.5, 0.7], abs=1e-12)


def test_blog_without_label_names_the_setting() -> None:
    group = GroupOutcomes.of([True], [False])
    with pytest.raises(ValueError, match=r"rl\.reward=naar"):
        get_reward("blog")(group, RLConfig())
