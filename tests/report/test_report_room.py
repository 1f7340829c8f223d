"""The report room's shared pieces: one run-file reader, one interval format, the `beacon eval`
report written by the command (the runner draws nothing), and the old import paths."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from beacon.cli import app
from beacon.errors import UserError
from beacon.report.markdown import format_interval
from beacon.runfolder import read_run_config, read_summary

runner = CliRunner()


def test_read_run_config_is_empty_without_a_config_and_plain_data_with_one(tmp_path: Path) -> None:
    assert read_run_config(tmp_path) == {}
    (tmp_path / "config.yaml").write_text("# config: x\n- not a mapping\n")
    assert read_run_config(tmp_path) == {}
    (tmp_path / "config.yaml").write_text("label: base\nengine:\n  model: tiny\n")
    assert read_run_config(tmp_path) == {"label": "base", "engine": {"model": "tiny"}}


def test_read_summary_is_empty_before_the_run_finished(tmp_path: Path) -> None:
    assert read_summary(tmp_path) == {}
    (tmp_path / "summary.json").write_text(json.dumps({"verify": {"kept": 2}}))
    assert read_summary(tmp_path) == {"verify": {"kept": 2}}


@pytest.mark.parametrize("text", ['{"overall": ', "[1, 2]"])
def test_a_damaged_summary_is_an_error_that_names_the_file(tmp_path: Path, text: str) -> None:
    """A summary is written whole, so one that does not parse was damaged: a report or a
    resumed stage must not read it as "not finished yet"."""
    (tmp_path / "summary.json").write_text(text)
    with pytest.raises(UserError, match=r"summary\.json is not a JSON object.*rerun the command"):
        read_summary(tmp_path)


def test_one_interval_format_for_every_report() -> None:
    from beacon.demo.report import fmt, fmt_difference
    from beacon.demo.stats import Interval
    from beacon.report.eval_runs import format_metric

    assert format_interval(0.6123, 0.55, 0.7) == "0.61 [0.55, 0.70]"
    assert format_interval(0.6123) == "0.61"  # no interval: no brackets
    assert format_interval(math.nan, 0.1, 0.2) == "—"
    assert format_interval(3.0, 1.0, 5.0, spec="{:+.1f}", undefined="n/a") == "+3.0 [+1.0, +5.0]"
    assert fmt(Interval(0.6123, 0.55, 0.7)) == "0.61 [0.55, 0.70]"
    assert fmt(math.nan) == "n/a"
    assert fmt_difference(Interval(0.27, 0.19, 0.35)) == "+0.27 [+0.19, +0.35]"
    assert format_metric(0.0314, -0.01, 0.07, "diff") == "+3.1 [-1.0, +7.0]"


def test_old_import_paths_re_export_the_report_room() -> None:
    from beacon.eval import plots, report
    from beacon.report import eval_runs, figures, markdown, train_runs
    from beacon.train import report as train_report

    assert report.write_report is eval_runs.write_report
    assert report.markdown_table is markdown.markdown_table
    assert plots.PLOTS is figures.PLOTS and plots.save_figure is figures.save_figure
    assert train_report.write_train_report is train_runs.write_train_report


def test_beacon_eval_writes_its_report_unless_told_not_to(
    tmp_path: Path, tiny_model_path: Path
) -> None:
    base = ["eval", "--model", str(tiny_model_path), "--bench", "synth", "--limit", "1",
            "--modes", "notool", "--no-progress", "--set", "bootstrap=0",
            "--set", "agent.max_new_tokens_per_turn=4",
            "--set", "agent.max_total_new_tokens=4"]  # fmt: skip
    done = runner.invoke(app, [*base, "--out", str(tmp_path / "with")])
    assert done.exit_code == 0, done.output
    assert f"report: {tmp_path / 'with' / 'report.md'}" in done.output
    assert "## Benchmark: synth" in (tmp_path / "with" / "report.md").read_text()
    done = runner.invoke(app, [*base, "--out", str(tmp_path / "without"), "--set", "report=false"])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "without" / "summary.json").is_file()
    assert not (tmp_path / "without" / "report.md").exists()
