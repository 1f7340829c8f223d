"""`beacon.jsonl`'s two bad-line policies: a run's own appended files and files written whole."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from beacon.jsonl import CorruptJsonl, parse_jsonl, read_jsonl


def test_an_appended_file_skips_its_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"a": 2}\n{"a": 3')
    assert list(read_jsonl(path)) == [{"a": 1}, {"a": 2}]
    assert list(read_jsonl(tmp_path / "missing.jsonl")) == []


def test_a_whole_file_keeps_a_last_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2}')
    assert list(read_jsonl(path, whole=True)) == [{"a": 1}, {"a": 2}]
    with pytest.raises(FileNotFoundError):
        list(read_jsonl(tmp_path / "missing.jsonl", whole=True))


def test_a_whole_file_refuses_a_bad_last_line_naming_it() -> None:
    lines = io.BytesIO(b'{"a": 1}\n{"a": ')
    with pytest.raises(CorruptJsonl, match=r"data\.zip:meta\.jsonl:2 is not valid JSON"):
        list(parse_jsonl(lines, "data.zip:meta.jsonl", whole=True))
