"""Per-mode statistics (accuracy, tool-call rate, lengths, ...) on hand-built records."""

from __future__ import annotations

import math

import pytest

from beacon.metrics import MODE_STATS, dedupe, mode_stats


def _rec(sid, correct, used, calls, attempted, tokens, parsed=True, error=None, score=None):
    return {
        "benchmark": "b",
        "sample_id": sid,
        "mode": "tool",
        "k": 0,
        "correct": correct,
        "used_tool": used,
        "tool_calls": calls,
        "attempted_tool_calls": attempted,
        "response_tokens": tokens,
        "parsed": parsed,
        "error": error,
        "score": score,
    }


RECORDS = [
    _rec("1", True, True, 2, 2, 100, score=1.0),
    _rec("2", False, True, 1, 3, 300, parsed=False, score=0.0),
    _rec("3", True, False, 0, 0, None, error="sandbox timeout after 10 s", score=0.5),
    _rec("4", True, False, 0, 1, 200),
]


def test_mode_stats_by_hand():
    s = mode_stats(RECORDS)
    assert (s["n_items"], s["n_samples"]) == (4, 4)
    assert s["accuracy"] == pytest.approx(3 / 4)
    assert s["score"] == pytest.approx(1.5 / 3)  # record 4 has no score
    assert s["tool_rate"] == pytest.approx(2 / 4)
    assert s["calls_per_episode"] == pytest.approx(3 / 4)  # 2 + 1 + 0 + 0
    assert s["attempted_calls_per_episode"] == pytest.approx(6 / 4)  # 2 + 3 + 0 + 1
    assert s["response_tokens"] == pytest.approx(600 / 3)  # record 3 reports none
    assert s["acc_with_tool"] == pytest.approx(1 / 2)  # records 1, 2
    assert s["acc_without_tool"] == pytest.approx(2 / 2)  # records 3, 4
    assert s["unparsed_rate"] == pytest.approx(1 / 4)
    assert s["error_rate"] == pytest.approx(1 / 4)


def test_undefined_conditional_accuracy_is_nan():
    s = mode_stats([_rec("1", True, False, 0, 0, 10)])
    assert math.isnan(s["acc_with_tool"])
    assert s["acc_without_tool"] == 1.0


def test_accuracy_pools_samples_of_an_item():
    # item x: 3 samples, 1 correct; item y: 1 sample, correct -> 2 / 4 samples
    records = [_rec("x", c, False, 0, 0, 1) | {"k": k} for k, c in enumerate([True, False, False])]
    records.append(_rec("y", True, False, 0, 0, 1))
    s = mode_stats(records)
    assert s["accuracy"] == pytest.approx(2 / 4)
    assert (s["n_items"], s["n_samples"]) == (2, 4)


def test_every_stat_is_reported():
    assert set(MODE_STATS) <= set(mode_stats(RECORDS))


def test_dedupe_keeps_first_and_logs(caplog):
    twice = [RECORDS[0], dict(RECORDS[0], correct=False), RECORDS[1]]
    with caplog.at_level("WARNING"):
        kept = dedupe(twice)
    assert kept == [RECORDS[0], RECORDS[1]]
    assert "dropped 1 duplicate" in caplog.text
