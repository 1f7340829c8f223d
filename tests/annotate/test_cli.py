"""`beacon critic agreement` on ReVuE's Table 7a, and `beacon annotate FILE` at the door."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from beacon.annotate.cli import serve_command
from beacon.cli import app

from .helpers import build_rows

runner = CliRunner()
STAGES = ["CORRECT", "ACQUIRE", "READ", "GROUND", "OTHER"]
TABLE_7A = [[32, 0, 0, 0, 0], [0, 28, 0, 0, 0], [0, 3, 23, 0, 0], [0, 0, 0, 9, 0], [0, 0, 0, 0, 1]]


def table_7a_file(path: Path) -> None:
    """96 rollouts whose human (label) and critic stages reproduce Table 7a, plus 4 unusable."""
    rows = []
    for i, counts in enumerate(TABLE_7A):
        for j, count in enumerate(counts):
            for _ in range(count):
                rows.append(
                    {
                        "id": f"r{len(rows)}",
                        "correct": STAGES[i] == "CORRECT",
                        "label": {"stage": STAGES[i]},
                        "critic": {"stage": STAGES[j]},
                    }
                )
    rows.append(
        {"id": "skipped", "correct": False, "label": {"stage": "SKIP"}, "critic": {"stage": "READ"}}
    )
    rows.append({"id": "unlabelled", "correct": False, "label": None, "critic": {"stage": "READ"}})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # fmt: skip


def test_agreement_reproduces_table_7a(tmp_path: Path) -> None:
    path = tmp_path / "labelled.jsonl"
    table_7a_file(path)
    out = tmp_path / "agreement.json"
    result = runner.invoke(
        app, ["critic", "agreement", f"{path}:label", f"{path}:critic", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "(98 shared rollouts)" in result.output
    assert "overall    n=96    agreement  96.88%  κ 0.957" in result.output
    assert "incorrect  n=64    agreement  95.31%  κ 0.925" in result.output
    assert "READ 0 3 23 0 0" in [" ".join(line.split()) for line in result.output.splitlines()]
    (pair,) = json.loads(out.read_text())
    assert pair["overall"]["matrix"]["counts"] == TABLE_7A
    assert pair["incorrect"]["n"] == 64


def test_label_log_gives_one_source_per_annotator(tmp_path: Path) -> None:
    log = tmp_path / "labels.jsonl"
    entries = [
        ("a", "r1", "READ"),
        ("b", "r1", "READ"),
        ("a", "r2", "GROUND"),
        ("b", "r2", "ACQUIRE"),
        ("a", "r2", "ACQUIRE"),
    ]  # a relabels r2: last write wins
    log.write_text("".join(json.dumps({"id": i, "annotator": w, "stage": s, "note": ""}) + "\n"
                           for w, i, s in entries))  # fmt: skip
    result = runner.invoke(app, ["critic", "agreement", str(log)])
    assert result.exit_code == 0, result.output
    assert f"{log}@a  vs  {log}@b" in result.output
    assert "overall    n=2     agreement 100.00%  κ 1.000" in result.output


def test_agreement_errors_say_what_to_pass(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"id": "r1", "critic": {"stage": "READ"}}) + "\n")
    result = runner.invoke(app, ["critic", "agreement", str(path)])
    assert result.exit_code == 1 and "pass at least two" in result.output
    result = runner.invoke(app, ["critic", "agreement", str(path), str(tmp_path / "no.jsonl")])
    assert result.exit_code == 1 and "no file" in result.output
    path.write_text("[1, 2]\n")
    result = runner.invoke(app, ["critic", "agreement", str(path), str(path)])
    assert result.exit_code == 1 and "record 1 is not a JSON object" in result.output


def test_annotate_refuses_a_foreign_file(tmp_path: Path) -> None:
    foreign = tmp_path / "samples.jsonl"
    foreign.write_text(json.dumps({"key": "synth/0/tool/0", "correct": True}) + "\n")
    result = runner.invoke(app, ["annotate", str(foreign), "--no-browser"])
    assert result.exit_code == 1
    assert "is not a usable annotation file" in result.output
    assert "beacon annotate sample RUN" in result.output


def test_server_binds_localhost_by_default(tmp_path: Path) -> None:
    assert inspect.signature(serve_command).parameters["host"].default.default == "127.0.0.1"
    path = tmp_path / "sample.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in build_rows(tmp_path)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "beacon.cli", "annotate", str(path), "--port", "0", "--no-browser"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        lines = [proc.stdout.readline() for _ in range(2)]
        url = lines[1].split()[1]
        assert url.startswith("http://127.0.0.1:"), lines
        for _ in range(100):  # the socket listens before uvicorn serves: wait for the app
            try:
                response = httpx.get(url + "api/rows", timeout=5)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert response.json()["file"] == "sample.jsonl"
        assert (tmp_path / "sample.labels.jsonl").exists()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize("command", [["annotate"], ["annotate", "sample"], ["critic", "agreement"]])
def test_commands_explain_themselves(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0 and "Usage" in result.output
