"""Exact agreement, κ and the confusion matrix against ReVuE's Table 7a."""

from __future__ import annotations

import pytest

from beacon.metrics import agreement, cohens_kappa, confusion_matrix

STAGES = ["CORRECT", "ACQUIRE", "READ", "GROUND", "OTHER"]
# ReVuE, Appendix B.6, Table 7a: human (rows) vs critic (columns) label counts on 96 rollouts.
TABLE_7A = [
    [32, 0, 0, 0, 0],
    [0, 28, 0, 0, 0],
    [0, 3, 23, 0, 0],
    [0, 0, 0, 9, 0],
    [0, 0, 0, 0, 1],
]


def expand(matrix: list[list[int]]) -> tuple[list[str], list[str]]:
    human, critic = [], []
    for i, row in enumerate(matrix):
        for j, count in enumerate(row):
            human += [STAGES[i]] * count
            critic += [STAGES[j]] * count
    return human, critic


def test_table_7a_overall() -> None:
    human, critic = expand(TABLE_7A)
    assert len(human) == 96
    assert agreement(human, critic) == pytest.approx(93 / 96, abs=1e-12)
    assert round(100 * agreement(human, critic), 2) == 96.88
    # p_e = (32·32 + 28·31 + 26·23 + 9·9 + 1·1) / 96² = 2572/9216
    p_e = 2572 / 9216
    assert cohens_kappa(human, critic) == pytest.approx((93 / 96 - p_e) / (1 - p_e), abs=1e-12)
    assert round(cohens_kappa(human, critic), 3) == 0.957


def test_table_7a_incorrect_rollouts_only() -> None:
    # The 32 CORRECT rollouts are the correct ones; the paper reports 95.31%, κ = 0.925 on the rest.
    human, critic = expand([[0] * 5, *TABLE_7A[1:]])
    assert len(human) == 64
    assert round(100 * agreement(human, critic), 2) == 95.31
    assert round(cohens_kappa(human, critic), 3) == 0.925


def test_confusion_matrix_round_trips_table_7a() -> None:
    human, critic = expand(TABLE_7A)
    matrix = confusion_matrix(human, critic, STAGES)
    assert matrix.labels == STAGES
    assert matrix.counts == TABLE_7A
    assert (matrix.total, matrix.agreed) == (96, 93)


def test_confusion_matrix_appends_unlisted_labels() -> None:
    matrix = confusion_matrix(["A", "B"], ["A", "C"], ["A"])
    assert matrix.labels == ["A", "B", "C"]
    assert matrix.counts == [[1, 0, 0], [0, 0, 1], [0, 0, 0]]


@pytest.mark.parametrize("fn", [agreement, cohens_kappa, confusion_matrix])
def test_bad_inputs_say_what_to_pass(fn) -> None:
    with pytest.raises(ValueError, match="got 2 and 1 labels"):
        fn(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="at least one"):
        fn([], [])
