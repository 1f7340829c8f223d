"""benchmarks/demo2_student_pilot.py sorts the scripted critic's diagnoses of wrong red `told`
rollouts into the designed error (key read right, then a cell it does not name), a misread key
and the rest, by the critic's own wording. Checked on discrepancies the critic itself writes
(`scripted_critic.key_discrepancy`), so a change of that wording fails here, not in a pilot's
table."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from beacon.benchmarks import get_benchmark
from beacon.train.opd.scripted_critic import key_discrepancy

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def error_kind(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], str]:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from demo2_student_pilot import error_kind

    return error_kind


def test_the_critics_told_discrepancies_sort_into_the_pilots_kinds(
    error_kind: Callable[[str], str],
) -> None:
    meta = next(iter(get_benchmark("synth_keys_told").load(limit=1, seed=1))).metadata
    key_box, cells = tuple(meta["key_box"]), [tuple(box) for box in meta["cell_boxes"]]
    named = cells[meta["target"] - 1]
    other = next(box for box in cells if box != named)
    right_note = re.match(r"Key: (\d)", f"Key: {meta['key']}")
    wrong_note = re.match(r"Key: (\d)", f"Key: {(meta['key'] % 8) + 1}")
    cases = {
        "designed": key_discrepancy(meta, [key_box, other], right_note, "0", owns=False),
        "misread key": key_discrepancy(meta, [key_box, other], wrong_note, "0", owns=False),
        "other": key_discrepancy(meta, [other], None, "0", owns=False),
    }
    assert cases["designed"].startswith("cropped cell")  # the wording the sorting reads
    for kind, discrepancy in cases.items():
        assert error_kind(discrepancy) == kind, discrepancy
    wrong_digit = (meta["digits"][meta["target"] - 1] + 1) % 10
    misread_cell = key_discrepancy(meta, [key_box, named], right_note, str(wrong_digit), True)
    assert error_kind(misread_cell) == "other", misread_cell
