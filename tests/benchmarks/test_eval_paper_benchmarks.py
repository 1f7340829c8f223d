"""`beacon eval --bench babyvision,tirbench,gameqa --data ...` on local copies in the published
layouts, with the tiny model (notool mode, a few tokens: seconds, not minutes)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from beacon.cli import app

from .local_copies import build_babyvision, build_gameqa, build_tirbench


def test_beacon_eval_runs_the_three_paper_benchmarks(tmp_path: Path, tiny_model_path) -> None:
    data = {
        "babyvision": build_babyvision(tmp_path / "bv"),
        "tirbench": build_tirbench(tmp_path / "tir"),
        "gameqa": build_gameqa(tmp_path / "gq"),
    }
    out = tmp_path / "run"
    args = ["eval", "--bench", "babyvision,tirbench,gameqa", "--modes", "notool"]
    for name, path in data.items():
        args += ["--data", f"{name}={path}"]
    args += ["--limit", "2", "--concurrency", "2", "--out", str(out), "--no-progress"]
    args += ["--set", "agent.max_new_tokens_per_turn=6", "--set", "agent.max_total_new_tokens=6"]
    args += ["--set", "bootstrap=0", "--set", "report=false"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert sorted(r["benchmark"] for r in records) == sorted(
        ["babyvision"] * 2 + ["tirbench"] * 2 + ["gameqa"] * 2
    )
    assert all(r["error"] is None and 0.0 <= r["score"] <= 1.0 for r in records)
    # records arrive in completion order (concurrency 2): compare the set, not the first one
    assert {r["category"] for r in records if r["benchmark"] == "tirbench"} == {"refcoco", "jigsaw"}
    summary = json.loads((out / "summary.json").read_text())
    aggregates = {b: summary["benchmarks"][b]["aggregates"]["notool"] for b in data}
    assert {"score", "accuracy", "score/jigsaw"} <= set(aggregates["tirbench"])
    assert "subtype/Fine-grained Discrimination/Find the same" in aggregates["babyvision"]
    assert "accuracy" in aggregates["gameqa"]
