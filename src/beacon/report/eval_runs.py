"""`beacon report DIR [DIR ...]`: one ``report.md`` (tables + PNG plots) comparing eval runs.

Each run folder holds what `beacon eval` writes: ``samples.jsonl`` (one record per item × mode ×
sample), ``config.yaml`` (the resolved config; gives the run's label and model) and, once the run
finished, ``summary.json``. The report recomputes every metric from ``samples.jsonl`` with
`beacon.metrics.summarize`, so a run that was killed mid-way still gets a consistent report (a
torn last line is skipped); from ``summary.json`` it only takes benchmark-specific
``aggregates`` when the caller passes no aggregators (the stored ones came from the benchmark
registry at eval time).

Outputs in `out_dir`: ``report.md``, ``report.json`` (every run's summary, NaN as null) and
``plots/*.png``, embedded in the markdown by relative path. `beacon eval` writes the same report
of its one run at the end (`report_eval_run`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from beacon.benchmarks import get_benchmark
from beacon.eval.config import EvalConfig
from beacon.eval.records import SAMPLES_FILE, read_samples
from beacon.metrics import summarize
from beacon.metrics.summary import Aggregator, Summary
from beacon.report.figures import OVERALL, benchmark_names, metric_at, plot_all, summary_section
from beacon.report.markdown import format_interval, markdown_table, write_report_files
from beacon.runfolder import read_run_config, read_summary


@dataclass
class RunReport:
    """One run as the report shows it: a label, where it came from, and its summary."""

    label: str
    run_dir: Path
    model: str | None
    summary: dict
    gate_threshold: float | None = None  # agent.gate.threshold of the run's config


def _model_name(config: Mapping) -> str | None:
    engine = config.get("engine")
    model = engine.get("model") if isinstance(engine, Mapping) else config.get("model")
    if isinstance(model, Mapping):
        model = model.get("name") or model.get("path") or model.get("id")
    return None if model is None else str(model)


def _stored_aggregates(run_dir: Path) -> dict[str, dict]:
    benchmarks = read_summary(run_dir).get("benchmarks", {})
    return {
        b: s["aggregates"]
        for b, s in benchmarks.items()
        if isinstance(s, dict) and "aggregates" in s
    }


def load_run(
    run_dir: Path,
    *,
    bootstrap: int = 1000,
    seed: int = 0,
    aggregators: Mapping[str, Aggregator] | None = None,
    summary: dict | None = None,
) -> RunReport:
    """Read one run folder and summarize it (see the module docstring for what is read).

    `summary`: the run's summary when the caller has just computed it (`beacon eval` does), so
    the records are not summarized twice.
    """
    samples = run_dir / SAMPLES_FILE
    if not samples.is_file():
        raise ValueError(
            f"no {SAMPLES_FILE} in {run_dir}; pass the folder that `beacon eval --out` wrote."
        )
    config = read_run_config(run_dir)
    if summary is None:
        summary = summarize(
            read_samples(samples), bootstrap=bootstrap, seed=seed, aggregators=aggregators
        )
    if not aggregators:
        for bench, aggregates in _stored_aggregates(run_dir).items():
            if bench in summary["benchmarks"]:
                summary["benchmarks"][bench]["aggregates"] = aggregates
    model = _model_name(config)
    label = str(config.get("label") or config.get("name") or model or run_dir.name)
    return RunReport(label, run_dir, model, summary, _gate_threshold(config))


def _gate_threshold(config: Mapping) -> float | None:
    agent = config.get("agent")
    gate = agent.get("gate") if isinstance(agent, Mapping) else None
    threshold = gate.get("threshold") if isinstance(gate, Mapping) else None
    return None if threshold is None else float(threshold)


def _unique_labels(runs: list[RunReport]) -> None:
    """Append the folder name to labels that several runs share (same model, two configs)."""
    counts = Counter(run.label for run in runs)
    for run in runs:
        if counts[run.label] > 1:
            run.label = f"{run.label} ({run.run_dir.name})"


# (header, path into a section, format); formats: pct = fraction as %, diff = signed points.
TOOL_EFFECT_COLUMNS = (
    ("Acc notool", ("modes", "notool", "accuracy"), "pct"),
    ("Acc tool", ("modes", "tool", "accuracy"), "pct"),
    ("TE", ("adaptivity", "te"), "diff"),
    ("TE easy", ("adaptivity", "te_easy"), "diff"),
    ("TE hard", ("adaptivity", "te_hard"), "diff"),
    ("Gain", ("adaptivity", "gain"), "pct"),
    ("Harm", ("adaptivity", "harm"), "pct"),
    ("Δ_TE", ("adaptivity", "delta_te"), "diff"),
    ("Gain share", ("adaptivity", "gain_share"), "pct"),
    ("Harm share", ("adaptivity", "harm_share"), "pct"),
    ("MA", ("adaptivity", "mode_adaptiveness"), "pct"),
    ("Text-Retain", ("adaptivity", "text_retain"), "pct"),
)
BEHAVIOUR_COLUMNS = (
    ("Accuracy", "accuracy", "pct"),
    ("Tool-call rate", "tool_rate", "pct"),
    ("Calls/episode", "calls_per_episode", "num2"),
    ("Response tokens", "response_tokens", "num0"),
    ("Acc with tool", "acc_with_tool", "pct"),
    ("Acc without tool", "acc_without_tool", "pct"),
    ("Unparsed", "unparsed_rate", "pct"),
    ("Errors", "error_rate", "pct"),
    ("Wall s/episode", "wall_time_s", "num2"),
)
GATE_MODES = ("gated", "tool", "notool")
GATE_COLUMNS = (
    ("Accuracy", "accuracy", "pct"),
    ("Tool-call rate", "tool_rate", "pct"),
    ("Wall s/episode", "wall_time_s", "num2"),
    ("Mean p_tool", "gate_p_tool", "sig3"),
)
SPLIT_COLUMNS = (
    ("Acc notool", ("modes", "notool", "accuracy"), "pct"),
    ("Acc tool", ("modes", "tool", "accuracy"), "pct"),
    ("TE", ("adaptivity", "te"), "diff"),
    ("Gain", ("adaptivity", "gain"), "pct"),
    ("Harm", ("adaptivity", "harm"), "pct"),
    ("MA", ("adaptivity", "mode_adaptiveness"), "pct"),
    ("Tool-call rate", ("modes", "tool", "tool_rate"), "pct"),
)
NUMBER_FORMATS = {
    "pct": "{:.1f}",
    "diff": "{:+.1f}",
    "sig3": "{:.3g}",
    "num2": "{:.2f}",
    "num0": "{:.0f}",
}


def format_metric(value: float, low: float, high: float, kind: str) -> str:
    """'61.2 [58.0, 64.1]' (fractions shown in %); '—' when undefined; no brackets without CI."""
    scale = 100.0 if kind in ("pct", "diff") else 1.0
    return format_interval(scale * value, scale * low, scale * high, NUMBER_FORMATS[kind])


def _tool_effect_table(runs: list[RunReport], group: str) -> list[str]:
    rows = []
    for run in runs:
        section = summary_section(run.summary, group)
        if section is None:
            continue
        cells = [
            format_metric(*metric_at(section, path), kind) for _, path, kind in TOOL_EFFECT_COLUMNS
        ]
        rows.append([run.label, str(section["n_paired"]), *cells])
    return markdown_table(["Run", "Items", *(c[0] for c in TOOL_EFFECT_COLUMNS)], rows)


def _behaviour_table(runs: list[RunReport], group: str) -> list[str]:
    rows = []
    for run in runs:
        section = summary_section(run.summary, group)
        for mode in (section or {}).get("modes", {}):
            cells = [
                format_metric(*metric_at(section, ("modes", mode, key)), kind)
                for _, key, kind in BEHAVIOUR_COLUMNS
            ]
            rows.append([run.label, mode, *cells])
    return markdown_table(["Run", "Mode", *(c[0] for c in BEHAVIOUR_COLUMNS)], rows)


def _gate_table(runs: list[RunReport], group: str) -> list[str]:
    """Gated vs tool vs notool, for runs that have a gated mode; empty when none has."""
    rows = []
    for run in runs:
        section = summary_section(run.summary, group) or {}
        if "gated" not in section.get("modes", {}):
            continue
        paths = section.get("gate_paths", {})
        threshold = "—" if run.gate_threshold is None else f"{run.gate_threshold:g}"
        gate_cells = [threshold, str(paths.get("tool", 0)), str(paths.get("notool", 0))]
        for mode in (m for m in GATE_MODES if m in section["modes"]):
            cells = [
                format_metric(*metric_at(section, ("modes", mode, key)), kind)
                for _, key, kind in GATE_COLUMNS
            ]
            own = gate_cells if mode == "gated" else ["—"] * 3
            rows.append([run.label, mode, own[0], *cells, *own[1:]])
    if not rows:
        return []
    header = ["Run", "Mode", "Threshold", *(c[0] for c in GATE_COLUMNS), "→ tool", "→ notool"]
    return ["**Inference gate**", "", *markdown_table(header, rows), ""]


def _split_table(runs: list[RunReport], bench: str, split: str, title: str) -> list[str]:
    rows = []
    for run in runs:
        for value, section in (
            (summary_section(run.summary, bench) or {}).get(split) or {}
        ).items():
            cells = [
                format_metric(metric_at(section, path)[0], float("nan"), float("nan"), kind)
                for _, path, kind in SPLIT_COLUMNS
            ]
            rows.append([run.label, value, str(section["n_paired"]), *cells])
    if not rows:
        return []
    header = ["Run", title, "Items", *(c[0] for c in SPLIT_COLUMNS)]
    return [
        f"**By {title.lower()}** (point estimates; CIs in report.json)",
        "",
        *markdown_table(header, rows),
        "",
    ]


def _aggregates_table(runs: list[RunReport], bench: str) -> list[str]:
    rows, names = [], []
    for run in runs:
        for mode, values in (
            (summary_section(run.summary, bench) or {}).get("aggregates") or {}
        ).items():
            names += [n for n in values if n not in names]
            rows.append((run.label, mode, values))
    if not names:  # no benchmark-specific metric in any run: no table
        return []
    table = [
        [label, mode, *(_format_plain(values.get(n)) for n in names)]
        for label, mode, values in rows
    ]
    return [
        "**Benchmark-specific metrics**",
        "",
        *markdown_table(["Run", "Mode", *names], table),
        "",
    ]


def _format_plain(value) -> str:
    if value is None:
        return "—"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _runs_table(runs: list[RunReport]) -> list[str]:
    rows = []
    for run in runs:
        overall = run.summary["overall"]
        rows.append(
            [
                run.label,
                f"`{run.run_dir}`",
                run.model or "—",
                ", ".join(run.summary["benchmarks"]),
                ", ".join(overall["modes"]),
                str(overall["n_items"]),
                str(overall["n_samples"]),
                str(overall["n_unpaired"]),
            ]
        )
    header = ["Run", "Folder", "Model", "Benchmarks", "Modes", "Items", "Samples", "Unpaired"]
    return markdown_table(header, rows)


INTRO = """\
Values are percentages (differences in percentage points) with 95 % percentile-bootstrap
confidence intervals over items, `value [low, high]`. TE = Acc_tool − Acc_notool; Gain =
P[✓tool | ✗notool]; Harm = P[✗tool | ✓notool]; Δ_TE = Gain − Harm; Gain share =
P[✓tool ∧ ✗notool], Harm share = P[✗tool ∧ ✓notool] (their difference is TE); MA =
½(P[no tool | easy] + P[tool | hard]); Text-Retain = P[✓tool | ✓notool]. Here "easy" means
solved without tools and "hard" not solved without tools — not a benchmark's own difficulty
labels, which have their own table. "Items" counts items run in both modes. "All" pools every
item of every benchmark (sample-weighted). Definitions and K-sample aggregation:
docs/metrics.md. "—" = undefined (e.g. no easy item). Wall s/episode = mean seconds per
episode. The inference gate table (runs with a `gated` mode) sets gated against tool and notool:
the gate runs notool when p_tool < threshold, else tool; "→ tool" / "→ notool" count gated
episodes per path (docs/eval.md, "The inference gate")."""


PLOT_TITLES = {
    "accuracy_by_mode": "Accuracy by mode",
    "gain_harm": "Gain vs harm",
    "tool_rate": "Tool-call rate",
    "accuracy_vs_length": "Accuracy vs response length",
}


def render_markdown(runs: list[RunReport], plots: Mapping[str, str]) -> str:
    """The report text; `plots` maps figure names to paths relative to report.md."""
    lines = ["# Beacon evaluation report", "", INTRO, "", "## Runs", "", *_runs_table(runs), ""]
    summaries = [(run.label, run.summary) for run in runs]
    for group in [OVERALL, *benchmark_names(summaries)]:
        title = "All benchmarks (pooled)" if group == OVERALL else f"Benchmark: {group}"
        lines += [f"## {title}", "", "**Tool effect**", "", *_tool_effect_table(runs, group), ""]
        lines += ["**Behaviour by mode**", "", *_behaviour_table(runs, group), ""]
        lines += _gate_table(runs, group)
        if group != OVERALL:
            lines += _split_table(runs, group, "categories", "Category")
            lines += _split_table(runs, group, "difficulties", "Benchmark difficulty label")
            lines += _aggregates_table(runs, group)
    lines += ["## Plots", ""]
    for name, rel in plots.items():
        lines += [
            f"### {PLOT_TITLES.get(name, name)}",
            "",
            f"![{PLOT_TITLES.get(name, name)}]({rel})",
            "",
        ]
    return "\n".join(lines)


def write_report(
    run_dirs: Sequence[Path],
    out_dir: Path,
    *,
    bootstrap: int = 1000,
    seed: int = 0,
    aggregators: Mapping[str, Aggregator] | None = None,
) -> Path:
    """Summarize each run folder and write report.md, report.json and plots/*.png to `out_dir`.

    Returns the path of report.md. Runs appear in the order given.
    """
    if not run_dirs:
        raise ValueError(
            "write_report needs at least one run folder (what `beacon eval --out` wrote)."
        )
    runs = [
        load_run(Path(d), bootstrap=bootstrap, seed=seed, aggregators=aggregators) for d in run_dirs
    ]
    return render_report(runs, out_dir)


def report_eval_run(cfg: EvalConfig, summary: Summary | None = None) -> Path:
    """The report `beacon eval` writes into its run folder `cfg.out` at the end of a run.

    `summary`: what the run has just computed (summary.json's content), so the records are not
    summarized twice; without it (a run that ended on infrastructure errors) the report
    summarizes the records with the run's own bootstrap settings.
    """
    out = Path(cfg.out)
    aggregators = {name: get_benchmark(name).aggregate for name in cfg.benchmarks}
    run = load_run(
        out, bootstrap=cfg.bootstrap, seed=cfg.seed, aggregators=aggregators, summary=summary
    )
    return render_report([run], out)


def render_report(runs: Sequence[RunReport], out_dir: Path) -> Path:
    """Write report.md, report.json and plots/*.png for loaded runs; returns report.md."""
    _unique_labels(runs)
    out_dir.mkdir(parents=True, exist_ok=True)
    plot_paths = plot_all([(run.label, run.summary) for run in runs], out_dir / "plots")
    relative = {name: path.relative_to(out_dir).as_posix() for name, path in plot_paths.items()}
    payload = {
        run.label: {"run_dir": str(run.run_dir), "model": run.model, "summary": run.summary}
        for run in runs
    }
    return write_report_files(out_dir, render_markdown(runs, relative), payload, len(plot_paths))
