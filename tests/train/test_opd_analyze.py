"""`beacon revue analyze RUN` on hand-written run logs."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from beacon.cli import app
from beacon.report.revue_analysis import analyze_run


def write_run(run: Path) -> None:
    run.mkdir()
    revue = [
        {"step": 1, "impact": [10.0, 0.0, 0.0, 0.0, 0.0], "target_fallback": None},
        {"step": 1, "impact": None, "target_fallback": "misaligned"},
        {"step": 2, "impact": [1.0, 1.0, 1.0, 1.0, 1.0], "target_fallback": None},
    ]
    metrics = [
        {"step": 1, "loss": 1.0, "coverage_complete": 1, "coverage_misaligned": 1, "stage_READ": 2},
        {"step": 2, "loss": 0.9, "coverage_complete": 1, "coverage_misaligned": 0, "stage_READ": 1},
    ]
    critic = [{"step": 1, "error": None}, {"step": 2, "error": "critic timed out after 1 s"}]
    for name, rows in (("revue", revue), ("metrics", metrics), ("critic", critic)):
        (run / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_analyze_pools_impacts_and_sums_coverage(tmp_path: Path) -> None:
    write_run(tmp_path / "run")
    result = analyze_run(tmp_path / "run")
    assert result.per_step[0]["impact_sparsity"] == 1.0  # all impact on 1 of 5 positions
    assert result.per_step[1]["impact_sparsity"] == 0.2
    assert abs(result.impact_sparsity - (10 + 1) / 15) < 1e-12  # top 2 of 10 pooled positions
    assert result.coverage == {"complete": 2, "misaligned": 1}
    assert result.target_fallbacks == {"reflected": 2, "misaligned": 1}
    assert (result.critic_exchanges, result.critic_errors) == (2, 1)


def test_analyze_cli_prints_tables_and_names_a_bad_folder(tmp_path: Path) -> None:
    write_run(tmp_path / "run")
    out = CliRunner().invoke(app, ["revue", "analyze", str(tmp_path / "run")])
    assert out.exit_code == 0, out.output
    assert "impact sparsity" in out.output and "73.3%" in out.output
    assert "misaligned" in out.output
    bad = CliRunner().invoke(app, ["revue", "analyze", str(tmp_path)])
    assert bad.exit_code != 0 and "train.output_dir" in bad.output


def test_serve_teacher_command_is_registered() -> None:
    out = CliRunner().invoke(app, ["revue", "serve-teacher", "--help"])
    assert out.exit_code == 0 and "/v1/score" in out.output
