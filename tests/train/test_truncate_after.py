"""A resumed run cuts its logs back to the restored step (`truncate_after`): in place, so a
writer that opened the log before (OPD's critic exchange log) keeps appending to the file."""

from __future__ import annotations

import json
from pathlib import Path

from beacon.jsonl import JsonlWriter, read_jsonl
from beacon.train.core.metrics import truncate_after


def _lines(*steps: int, torn: str = "") -> str:
    return "".join(json.dumps({"step": s, "k": i}) + "\n" for i, s in enumerate(steps)) + torn


def test_an_appender_opened_before_the_cut_keeps_writing_to_the_log(tmp_path: Path) -> None:
    path = tmp_path / "critic.jsonl"
    path.write_text(_lines(1, 1, 2, 3, torn='{"step": 3, "k'))
    writer = JsonlWriter(path)  # as OPD's critic runner opens it before the loop's cut
    truncate_after(path, 2)
    writer.write({"step": 3, "k": "new"})
    writer.close()
    assert [(r["step"], r["k"]) for r in read_jsonl(path)] == [(1, 0), (1, 1), (2, 2), (3, "new")]


def test_blank_lines_and_a_log_with_nothing_to_cut(tmp_path: Path) -> None:
    path = tmp_path / "revue.jsonl"
    path.write_text(_lines(1) + "\n" + _lines(2, 3))
    truncate_after(path, 3)
    assert [r["step"] for r in read_jsonl(path)] == [1, 2, 3]
    truncate_after(path, 1)
    assert path.read_text() == _lines(1) + "\n"


def test_a_log_that_goes_back_to_earlier_steps_keeps_them(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(_lines(1, 3, 2))
    truncate_after(path, 2)
    assert [r["step"] for r in read_jsonl(path)] == [1, 2]
