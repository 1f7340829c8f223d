"""The label log: last write per (annotator, id) wins; concurrent writers lose nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from beacon.annotate.labels import LabelLog
from beacon.annotate.records import HumanLabel

WRITES = 40


def test_last_write_per_annotator_wins(tmp_path: Path) -> None:
    log = LabelLog(tmp_path / "labels.jsonl")
    log.append("r1", HumanLabel(stage="READ", note="first", annotator="ann"))
    log.append("r1", HumanLabel(stage="ACQUIRE", note="second", annotator="ann"))
    log.append("r1", HumanLabel(stage="GROUND", annotator="bob"))
    log.append("r2", HumanLabel(stage=None, note="draft", annotator="ann"))
    assert {k: v["stage"] for k, v in log.latest("ann").items()} == {"r1": "ACQUIRE", "r2": None}
    assert log.latest("ann")["r1"]["note"] == "second"
    assert log.latest("bob")["r1"]["stage"] == "GROUND"
    assert log.latest()["r1"]["annotator"] == "bob"


def test_torn_last_line_is_skipped(tmp_path: Path) -> None:
    log = LabelLog(tmp_path / "labels.jsonl")
    log.append("r1", HumanLabel(stage="READ", annotator="ann"))
    with log.path.open("ab") as f:
        f.write(b'{"id": "r2", "annot')  # a crash mid-write
    assert list(log.latest("ann")) == ["r1"]
    log.append("r3", HumanLabel(stage="GROUND", annotator="ann"))  # cuts the torn line first
    assert list(log.latest("ann")) == ["r1", "r3"]


WRITER = """
import sys
from pathlib import Path
from beacon.annotate.labels import LabelLog
from beacon.annotate.records import HumanLabel
log = LabelLog(Path(sys.argv[1]))
for i in range(int(sys.argv[3])):
    log.append(f"r{i}", HumanLabel(stage="OTHER", note="x" * 5000, annotator=sys.argv[2]))
"""


def _write_many(path: str, who: str) -> None:
    subprocess.run([sys.executable, "-c", WRITER, path, who, str(WRITES)], check=True)


def _write_in_process(log: LabelLog, who: str) -> None:
    for i in range(WRITES):
        log.append(f"r{i}", HumanLabel(stage="OTHER", note="x" * 5000, annotator=who))


def test_threads_and_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl"
    log = LabelLog(path)
    subprocs = [threading.Thread(target=_write_many, args=(str(path), f"proc{i}")) for i in (0, 1)]
    threads = [threading.Thread(target=_write_in_process, args=(log, f"th{i}")) for i in range(2)]
    for worker in [*subprocs, *threads]:
        worker.start()
    for worker in [*subprocs, *threads]:
        worker.join(timeout=60)
    lines = path.read_text().splitlines()
    assert len(lines) == 4 * WRITES
    assert all(json.loads(line)["note"] == "x" * 5000 for line in lines)  # no interleaving
    for who in ("proc0", "proc1", "th0", "th1"):
        assert len(log.latest(who)) == WRITES
