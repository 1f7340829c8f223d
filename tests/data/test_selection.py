"""pass@k counting and the hard-item rule c_i <= max_correct (beacon.md §2)."""

from __future__ import annotations

from beacon.data.selection import pass_counts, select_hard


def rec(sample_id: str, k: int, correct: bool, mode: str = "notool", finish: str = "answer"):
    return {
        "key": f"synth/{sample_id}/{mode}/{k}",
        "benchmark": "synth",
        "sample_id": sample_id,
        "mode": mode,
        "k": k,
        "correct": correct,
        "finish_reason": finish,
    }


def five(sample_id: str, n_correct: int) -> list[dict]:
    return [rec(sample_id, k, k < n_correct) for k in range(5)]


def test_sft_rule_keeps_items_correct_at_most_two_of_five():
    records = [r for i in range(6) for r in five(str(i), i)]  # item i is correct i times
    selection = select_hard(pass_counts(records, "notool"), k=5, max_correct=2)
    assert [e.item.sample_id for e in selection.kept] == ["0", "1", "2"]
    assert [e.correct for e in selection.kept] == [0, 1, 2]
    assert selection.summary.kept == 3 and selection.summary.total == 6
    assert selection.summary.dropped == {"too_easy": 3}
    assert selection.summary.extra["correct_histogram"] == [1, 1, 1, 1, 1, 1]


def test_rl_rule_keeps_three_of_five():
    records = [r for i in range(6) for r in five(str(i), i)]
    kept = select_hard(pass_counts(records, "notool"), k=5, max_correct=3).kept
    assert [e.item.sample_id for e in kept] == ["0", "1", "2", "3"]


def test_other_modes_are_ignored_and_incomplete_or_failed_items_dropped():
    records = [*five("a", 0), rec("a", 0, True, mode="tool")]
    records += five("b", 0)[:4]  # only 4 of 5 samples: the run did not finish this item
    records += [*five("c", 0)[:4], rec("c", 4, False, finish="engine_error")]
    selection = select_hard(pass_counts(records, "notool"), k=5, max_correct=2)
    assert [e.item.sample_id for e in selection.kept] == ["a"]
    assert selection.summary.dropped == {"incomplete": 1, "sample_failed": 1}
