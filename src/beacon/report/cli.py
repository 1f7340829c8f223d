"""`beacon report RUN [RUN ...]`: report.md, report.json and plots of eval or training runs.

The command picks the report by what the folders hold: a trainer's `metrics.jsonl` beside a
config with a `train:` section (`beacon.report.train_runs`), else `beacon eval`'s
`samples.jsonl` (`beacon.report.eval_runs`). Its heavy dependencies (matplotlib, the benchmark
registry) are imported inside the command, so `beacon --help` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import typer

from beacon.benchmarks import get_benchmark, list_benchmarks
from beacon.errors import UserError
from beacon.eval.records import SAMPLES_FILE


def report_command(
    runs: list[Path] = typer.Argument(
        ...,
        help="Run folders to compare: eval runs (beacon eval), or training runs (beacon train).",
    ),
    out: Path = typer.Option(
        None, help="Report folder; required to compare several runs (default: the one run)."
    ),
) -> None:
    """Write report.md, report.json and plots/ for one run, or comparing several: eval runs
    (accuracy, tool effect, MA) or training runs (learning curves, health alarms)."""
    # lazy: torch and matplotlib stay out of `beacon --help`
    from beacon.report.eval_runs import write_report
    from beacon.report.train_runs import is_train_run, write_train_report

    _check_report_out(runs, out)
    if all(is_train_run(run) for run in runs):
        typer.echo(f"report: {write_train_report(runs, out or runs[0])}")
        return
    for run in runs:
        if not (run / SAMPLES_FILE).exists():
            raise UserError(
                f"{run} has no {SAMPLES_FILE} (a beacon eval folder) nor metrics.jsonl (a beacon "
                "train folder); give run folders of one kind"
            )
    aggregators = {name: get_benchmark(name).aggregate for name in list_benchmarks()}
    path = write_report(runs, out or runs[0], aggregators=aggregators)
    typer.echo(f"report: {path}")


def _check_report_out(runs: list[Path], out: Path | None) -> None:
    """Several runs get a report folder of their own, outside every run."""
    if out is None and len(runs) > 1:
        raise UserError(
            f"comparing {len(runs)} runs writes a report of its own, not inside a run; "
            "give its folder with --out, e.g. --out runs/compare"
        )
    if out is not None and len(runs) > 1:
        inside = [run for run in runs if out.resolve().is_relative_to(run.resolve())]
        if inside:
            raise UserError(
                f"--out {out} is inside run {inside[0]}, whose own report it would overwrite; "
                "choose a folder outside the runs, e.g. --out runs/compare"
            )
