"""`beacon report RUN [RUN ...]` for training runs: learning curves and the alarms that fired.

A training run folder holds `config.yaml` and `metrics.jsonl` (one line per logged step, built
in `train/core/metrics.py`, with the `health/` metrics and alarm flags of `core/health.py`).
The report reads only those two files, so it works on a run that is still going or was killed
(a torn last line is skipped). Several runs are overlaid, one colour each, to compare them.

Outputs in `out_dir`, with the eval report's look (`beacon.report.figures.save_figure`,
`run_colors`, `beacon.report.markdown.markdown_table`): `report.md`, `report.json` (the last values
and the alarms of every run, NaN as null) and `plots/train_*.png`: learning curves (reward,
accuracy, loss, KL), tool use (tool rate overall and on items labelled easy / hard, MA) and
health (each alarm's metric with its threshold, red crosses where the alarm fired).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from beacon.report.figures import run_colors, save_figure
from beacon.report.markdown import format_interval, markdown_table, write_report_files
from beacon.runfolder import read_run_config
from beacon.train.core.config import HealthConfig
from beacon.train.core.health import RULES, Rule
from beacon.train.core.metrics import METRICS_FILE, read_metrics

Panel = tuple[str, tuple[tuple[str, str], ...]]
"""(title, ((metric key, line label), ...)): one subplot; a key a run lacks is left out."""

FIGURES: dict[str, tuple[str, tuple[Panel, ...]]] = {
    "train_learning": (
        "Learning curves",
        (
            ("reward", (("rl/reward_mean", "mean reward"),)),
            ("accuracy", (("rl/accuracy", "accuracy"), ("accuracy", "accuracy"))),
            ("loss", (("loss", "loss"),)),
            (
                "KL",
                (
                    ("rl/kl_old", "KL(π_old ‖ π_θ)"),
                    ("health/teacher_student_gap", "student − teacher (k1)"),
                ),
            ),
        ),
    ),
    "train_tool_use": (
        "Tool use by difficulty",
        (
            (
                "tool rate",
                (
                    ("health/tool_rate", "all"),
                    ("health/tool_rate_easy", "easy items"),
                    ("health/tool_rate_hard", "hard items"),
                ),
            ),
            ("mode adaptiveness", (("rl/mode_adaptiveness", "MA"),)),
        ),
    ),
    "train_health": (
        "Health",
        tuple((rule.key.removeprefix("health/"), ((rule.key, rule.name),)) for rule in RULES),
    ),
}
SUMMARY_KEYS = tuple(
    dict.fromkeys(
        [
            "rl/reward_mean",
            "rl/accuracy",
            "accuracy",
            "health/tool_rate",
            "health/tool_rate_easy",
            "health/tool_rate_hard",
            "rl/mode_adaptiveness",
            "rl/kl_old",
            *(rule.key for rule in RULES),
        ]
    )
)
"""The metrics of the "Last values" table, in order (each once)."""
THRESHOLDS = {
    "health/sampler_logprob_gap": "logprob_gap_max",
    "health/tool_rate": "tool_rate_min",
    "health/tool_rate_easy": "tool_rate_easy_max",
    "health/zero_variance_groups": "zero_variance_max",
    "health/entropy": "entropy_min",
    "health/dropped_share": "dropped_max",
}
"""Metric -> the `HealthConfig` setting drawn as its threshold (the relative one has none)."""


@dataclass
class TrainRun:
    """One training run as the report shows it."""

    label: str
    run_dir: Path
    trainer: str
    rows: list[dict[str, Any]]
    health: HealthConfig

    def series(self, key: str) -> tuple[list[int], list[float]]:
        """(steps, values) of `key` over the logged steps that have a number for it."""
        pairs = [(r["step"], r.get(key)) for r in self.rows]
        kept = [(s, float(v)) for s, v in pairs if isinstance(v, int | float)]
        return [s for s, _ in kept], [v for _, v in kept]


def is_train_run(run_dir: Path) -> bool:
    """A folder a trainer wrote: `metrics.jsonl` beside a config with a `train:` section."""
    return (run_dir / METRICS_FILE).is_file() and "train" in read_run_config(run_dir)


def load_train_run(run_dir: Path, label: str | None = None) -> TrainRun:
    config = read_run_config(run_dir)
    return TrainRun(
        label=label or run_dir.name,
        run_dir=run_dir,
        trainer=_trainer(config),
        rows=read_metrics(run_dir / METRICS_FILE),
        health=HealthConfig.model_validate(config.get("health") or {}),
    )


def _trainer(config: dict[str, Any]) -> str:
    if "rl" in config:
        return "grpo"
    if "teacher" in config:
        return "opd"
    return "sft"


def write_train_report(run_dirs: Sequence[Path], out_dir: Path) -> Path:
    """Write report.md, report.json and plots/ for training runs; returns report.md."""
    runs = [load_train_run(Path(d)) for d in run_dirs]
    if len({run.label for run in runs}) < len(runs):
        for run in runs:
            run.label = str(run.run_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = {}
    for name, (title, panels) in FIGURES.items():
        path = plot_curves(runs, title, panels, out_dir / "plots" / f"{name}.png")
        if path is not None:
            plots[title] = path.relative_to(out_dir).as_posix()
    payload = {run.label: _json_summary(run) for run in runs}
    return write_report_files(out_dir, render_markdown(runs, plots), payload, len(plots))


def plot_curves(
    runs: Sequence[TrainRun], title: str, panels: Sequence[Panel], path: Path
) -> Path | None:
    """One subplot per panel that some run has data for; None when none has any."""
    shown = [p for p in panels if any(run.series(k)[0] for run in runs for k, _ in p[1])]
    if not shown:
        return None
    cols = min(len(shown), 3)
    rows = math.ceil(len(shown) / cols)
    fig = Figure(figsize=(4.2 * cols, 3.2 * rows))
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, (name, lines) in zip(axes, shown, strict=False):
        _draw_panel(ax, runs, name, lines)
    for ax in axes[len(shown) :]:
        ax.set_visible(False)
    fig.suptitle(title)
    return save_figure(fig, path)


def _draw_panel(ax: Any, runs: Sequence[TrainRun], name: str, lines: Sequence) -> None:
    """Each run's lines (one colour per run, one style per metric), thresholds and alarms."""
    styles = ("-", "--", "-.")
    for color, run in zip(run_colors(len(runs)), runs, strict=True):
        for style, (key, label) in zip(styles, lines, strict=False):
            steps, values = run.series(key)
            if not steps:
                continue
            ax.plot(steps, values, style, color=color, marker=".", label=f"{run.label} · {label}")
            _mark_alarms(ax, run, key)
            setting = THRESHOLDS.get(key)
            if setting is not None and getattr(run.health, setting) is not None:
                ax.axhline(getattr(run.health, setting), color=color, linestyle=":", linewidth=1)
    ax.set_title(name)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)


def _mark_alarms(ax: Any, run: TrainRun, key: str) -> None:
    """Red crosses at the steps where an alarm on `key` fired."""
    for rule in RULES:
        if rule.key != key:
            continue
        flags = dict(zip(*run.series(f"health/alarm/{rule.name}"), strict=True))
        steps, values = run.series(key)
        fired = [(s, v) for s, v in zip(steps, values, strict=True) if flags.get(s)]
        if fired:
            ax.plot(*zip(*fired, strict=True), "x", color="red", markersize=7)


@dataclass(frozen=True)
class FiredAlarm:
    """An alarm over a run: how many logged steps it fired on, the first and last."""

    rule: Rule
    steps: list[int]


def fired_alarms(run: TrainRun) -> list[FiredAlarm]:
    out = []
    for rule in RULES:
        steps, flags = run.series(f"health/alarm/{rule.name}")
        fired = [s for s, f in zip(steps, flags, strict=True) if f]
        if fired:
            out.append(FiredAlarm(rule, fired))
    return out


def last_value(run: TrainRun, key: str) -> float:
    """The mean of `key` over the run's last `health.window` logged values (NaN: none)."""
    values = [v for v in run.series(key)[1] if math.isfinite(v)][-run.health.window :]
    return sum(values) / len(values) if values else math.nan


INTRO = """\
Curves are per logged step (`metrics.jsonl`). "Last" values are means over the last
`health.window` logged steps. Tool rates on easy / hard items use the items' own difficulty
labels; MA = ½(P[no tool | easy] + P[tool | hard]) over the step's groups (docs/rl.md). Health
metrics and alarms: docs/train.md, "Guard rails"; dotted lines are each run's thresholds, red
crosses the steps where an alarm fired."""


def render_markdown(runs: Sequence[TrainRun], plots: dict[str, str]) -> str:
    """The report text; `plots` maps figure titles to paths relative to report.md."""
    lines = ["# Beacon training report", "", INTRO, "", "## Runs", ""]
    rows = [
        [run.label, f"`{run.run_dir}`", run.trainer, str(len(run.rows)), _last_step(run)]
        for run in runs
    ]
    lines += markdown_table(["Run", "Folder", "Trainer", "Logged steps", "Last step"], rows)
    keys = [k for k in SUMMARY_KEYS if any(run.series(k)[0] for run in runs)]
    lines += ["", "## Last values", ""]
    table = [
        [k, *(format_interval(last_value(run, k), spec="{:.4g}") for run in runs)] for k in keys
    ]
    lines += markdown_table(["Metric", *(run.label for run in runs)], table)
    lines += ["", "## Alarms", "", *_alarm_lines(runs), "", "## Plots", ""]
    for title, rel in plots.items():
        lines += [f"### {title}", "", f"![{title}]({rel})", ""]
    return "\n".join(lines)


def _alarm_lines(runs: Sequence[TrainRun]) -> list[str]:
    rows = [
        [
            run.label,
            a.rule.name,
            str(len(a.steps)),
            str(a.steps[0]),
            str(a.steps[-1]),
            a.rule.advice,
        ]
        for run in runs
        for a in fired_alarms(run)
    ]
    if not rows:
        return ["No alarm fired."]
    header = ["Run", "Alarm", "Steps firing", "First", "Last", "What to do"]
    return markdown_table(header, rows)


def _json_summary(run: TrainRun) -> dict[str, Any]:
    last = {k: last_value(run, k) for k in SUMMARY_KEYS if run.series(k)[0]}
    return {
        "run_dir": str(run.run_dir),
        "trainer": run.trainer,
        "logged_steps": len(run.rows),
        "last": {k: v if math.isfinite(v) else None for k, v in last.items()},
        "alarms": {a.rule.name: a.steps for a in fired_alarms(run)},
    }


def _last_step(run: TrainRun) -> str:
    return str(run.rows[-1]["step"]) if run.rows else "—"
