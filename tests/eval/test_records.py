"""Crash safety of the run folder's JSONL files."""

import json
from pathlib import Path

import pytest

from beacon.eval.records import prepare_resume
from beacon.jsonl import CorruptJsonl, JsonlWriter, read_jsonl, repair_jsonl


def _write(path: Path, text: str) -> None:
    path.write_bytes(text.encode())


def test_torn_last_line_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    _write(path, '{"key": "a"}\n{"key": "b"}\n{"key": "c", "x"')
    assert repair_jsonl(path) == len('{"key": "c", "x"')
    assert [r["key"] for r in read_jsonl(path)] == ["a", "b"]


def test_terminated_but_corrupt_last_line_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    _write(path, '{"key": "a"}\n{"key": \n')
    repair_jsonl(path)
    assert path.read_text() == '{"key": "a"}\n'


def test_intact_file_is_untouched(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    _write(path, '{"key": "a"}\n')
    assert repair_jsonl(path) == 0
    assert path.read_text() == '{"key": "a"}\n'


def test_reader_skips_a_line_still_being_written(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    _write(path, '{"key": "a"}\n{"key": "b"')
    assert [r["key"] for r in read_jsonl(path)] == ["a"]


def test_resume_drops_orphan_and_duplicate_trajectories(tmp_path: Path) -> None:
    _write(tmp_path / "samples.jsonl", '{"key": "a"}\n{"key": "b"}\n{"ke')
    trajectories = [{"key": k, "trajectory": {}} for k in ("a", "b", "b", "c")]
    _write(
        tmp_path / "trajectories.jsonl",
        "".join(json.dumps(t) + "\n" for t in trajectories) + '{"key": "d", "traj',
    )
    done = prepare_resume(tmp_path)
    assert set(done) == {"a", "b"}
    kept = [t["key"] for t in read_jsonl(tmp_path / "trajectories.jsonl")]
    assert kept == ["a", "b"]


def test_writer_appends_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    writer = JsonlWriter(path)
    writer.write({"key": "a", "text": "é"})
    writer.write('{"key": "b"}')
    writer.close()
    assert [r["key"] for r in read_jsonl(path)] == ["a", "b"]
    assert path.read_bytes().endswith(b"\n")


def test_one_policy_for_bad_lines(tmp_path: Path) -> None:
    """Torn last line: skipped by readers, cut by repair; a bad line before it: an error."""
    path = tmp_path / "s.jsonl"
    _write(path, '{"key": "a"}\n\n{"key": \n')
    assert [r["key"] for r in read_jsonl(path)] == ["a"]
    _write(path, '{"key": "a"}\nnot json\n{"key": "b"}\n')
    with pytest.raises(CorruptJsonl, match=r"s\.jsonl:2 is not valid JSON"):
        list(read_jsonl(path))
    with pytest.raises(CorruptJsonl, match=r"s\.jsonl:2"):
        prepare_resume_with(tmp_path, path.read_text())


def prepare_resume_with(run_dir: Path, samples: str) -> dict:
    _write(run_dir / "samples.jsonl", samples)
    return prepare_resume(run_dir)


def test_summary_is_replaced_whole_or_not_at_all(tmp_path: Path, monkeypatch) -> None:
    """summary.json is written through a temporary file and `os.replace`: a run killed at any
    point before the replace leaves the old summary whole (a plain write truncates it first)."""
    from beacon import jsonl
    from beacon.eval.config import EvalConfig
    from beacon.eval.runner import finish_run

    _write(tmp_path / "samples.jsonl", "")
    old = '{"old": true}\n'
    _write(tmp_path / "summary.json", old)

    def killed(src: str, dst: str) -> None:
        raise KeyboardInterrupt("killed before the replace")

    monkeypatch.setattr(jsonl.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        finish_run(EvalConfig(benchmarks=["synth"], report=False, bootstrap=0), tmp_path)
    assert (tmp_path / "summary.json").read_text() == old
    monkeypatch.undo()
    finish_run(EvalConfig(benchmarks=["synth"], report=False, bootstrap=0), tmp_path)
    assert json.loads((tmp_path / "summary.json").read_text())["overall"]["n_samples"] == 0
