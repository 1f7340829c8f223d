"""The blog's difficulty labels and pitfall warnings (seed 001)."""

from __future__ import annotations

import logging

import pytest
import torch

from beacon.train.core.outcomes import (
    answer_confidence,
    difficulty_warnings,
    label_from_confidence,
    label_from_passes,
    tool_needed,
    warn_difficulty,
)


def test_labels_from_pass_counts() -> None:
    assert label_from_passes(3, 5) == "easy"
    assert label_from_passes(2, 5) == "hard"
    assert label_from_passes(1, 5, easy_threshold=0.2) == "easy"
    assert label_from_passes(0, 1) == "hard"
    with pytest.raises(ValueError, match="pass count"):
        label_from_passes(6, 5)
    with pytest.raises(ValueError, match="easy_threshold"):
        label_from_passes(1, 5, easy_threshold=0.0)


def test_labels_from_confidence_are_strictly_above_085() -> None:
    assert label_from_confidence(0.86) == "easy"
    assert label_from_confidence(0.85) == "hard"
    assert label_from_confidence(0.2) == "hard"
    with pytest.raises(ValueError, match="probability"):
        label_from_confidence(1.2)


def test_answer_confidence_is_max_softmax() -> None:
    logits = torch.tensor([[0.0, 0.0], [0.0, torch.log(torch.tensor(3.0))]])
    assert answer_confidence(logits).tolist() == pytest.approx([0.5, 0.75])


def test_warnings() -> None:
    assert difficulty_warnings(["hard"] * 3 + ["easy"] * 7) == []  # 30% hard, γ 0.2 < β 0.5
    low = difficulty_warnings(["hard"] + ["easy"] * 9)
    assert len(low) == 2 and "10% of the RL set is hard" in low[0]  # and (0.9·0.2 > 0.1·0.5)
    assert any("tool phobia" in w for w in difficulty_warnings(["hard", "easy"], gamma=0.6))
    assert difficulty_warnings([])  # nothing labelled


def test_warn_difficulty_logs(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="beacon.train.core.outcomes"):
        warn_difficulty(["easy"] * 10)
    assert "hard" in caplog.text


def test_tool_needed_is_wrong_without_and_right_with_the_tool() -> None:
    assert tool_needed([0, 1, 0, 1], [1, 1, 0, 0]) == [True, False, False, False]
    assert tool_needed([0.2, 0.6], [0.8, 0.8]) == [True, False]
    with pytest.raises(ValueError, match="pass rates"):
        tool_needed([0.0], [])
