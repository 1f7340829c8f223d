"""The annotation JSONL loader: good files load; corrupt or foreign ones get a clear message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from beacon.annotate.records import AnnotationFileError, load_rows, parse_rows

EVAL_RECORD = {"key": "synth/0/tool/0", "benchmark": "synth", "correct": False, "k": 0}


def test_fixture_file_loads(annotation_file: Path) -> None:
    rows = load_rows(annotation_file)
    assert [r.group_type for r in rows].count("mixed") == 3
    assert rows[0].critic is not None and rows[0].critic.stage == "CORRECT"
    assert rows[0].parsed_trajectory().num_tool_calls == 1


def test_corrupt_line_is_named(annotation_file: Path) -> None:
    lines = annotation_file.read_text().splitlines()
    lines[2] = lines[2][: len(lines[2]) // 2]  # a torn line
    with pytest.raises(AnnotationFileError, match=r"line 3: not valid JSON") as err:
        parse_rows("\n".join(lines), "x.jsonl")
    assert "1 bad lines" in str(err.value)


def test_foreign_jsonl_says_what_an_annotation_file_is() -> None:
    text = "\n".join(json.dumps(EVAL_RECORD) for _ in range(8))
    with pytest.raises(AnnotationFileError) as err:
        parse_rows(text, "samples.jsonl")
    message = str(err.value)
    assert "samples.jsonl is not a usable annotation file (8 bad lines)" in message
    assert "line 1: id: Field required" in message and "group_id: Field required" in message
    assert "... and 3 more" in message
    assert "beacon annotate sample RUN" in message


def test_bad_stage_trajectory_and_duplicate_ids(annotation_file: Path) -> None:
    rows = [json.loads(line) for line in annotation_file.read_text().splitlines()]
    rows[1]["critic"]["stage"] = "PERCEIVE"
    rows[2]["trajectory"]["segments"][0]["colour"] = "red"
    rows[3]["id"] = rows[0]["id"]
    with pytest.raises(AnnotationFileError) as err:
        parse_rows("\n".join(json.dumps(r) for r in rows), "f.jsonl")
    message = str(err.value)
    assert "line 2: critic.stage: Input should be 'CORRECT'" in message
    assert "line 3: trajectory: Value error, not a beacon Trajectory dict" in message
    assert f"line 4: duplicate id {rows[0]['id']!r}" in message


def test_empty_and_unreadable_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(AnnotationFileError, match="has no rows"):
        load_rows(empty)
    with pytest.raises(AnnotationFileError, match="cannot read"):
        load_rows(tmp_path / "missing.jsonl")
    binary = tmp_path / "image.jsonl"
    binary.write_bytes(b"\x89PNG\xff\xfe")
    with pytest.raises(AnnotationFileError, match="cannot read"):
        load_rows(binary)
