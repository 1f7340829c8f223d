"""PNG plots for `beacon report`: one function per figure, each over several runs' summaries.

A run is given as ``(label, summary)`` with ``summary`` from `beacon.metrics.summarize`. The
x-axis groups are the benchmarks (first-seen order over the runs) plus "all" (the pooled
``overall`` section). Figures are drawn on the Agg canvas directly (no pyplot state), so plotting
is thread-safe and needs no display. `save_figure` and `run_colors` give every report figure
(eval and training) the same resolution and run colours.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

RunSummary = tuple[str, Mapping]
OVERALL = "all"
MODE_MARKERS = {"notool": "o", "tool": "s", "gated": "D", "hinted": "^"}
MODE_HATCH = {"notool": "", "tool": "//", "gated": "xx", "hinted": ".."}


def benchmark_names(runs: Sequence[RunSummary]) -> list[str]:
    """Benchmarks of all runs in first-seen order."""
    names: list[str] = []
    for _, summary in runs:
        names += [b for b in summary["benchmarks"] if b not in names]
    return names


def summary_section(summary: Mapping, group: str) -> Mapping | None:
    """The pooled section of a summary for `OVERALL`, else that benchmark's (None: absent)."""
    return summary["overall"] if group == OVERALL else summary["benchmarks"].get(group)


def metric_at(section: Mapping | None, path: Sequence[str]) -> tuple[float, float, float]:
    """(value, ci_low, ci_high) at `path` (e.g. ("modes", "tool", "accuracy")); NaN if absent."""
    value, interval = section, (section or {}).get("ci")
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
        interval = interval.get(key) if isinstance(interval, Mapping) else None
    low, high = interval if isinstance(interval, (list, tuple)) else (None, None)
    return tuple(np.nan if v is None else float(v) for v in (value, low, high))


def _grouped_bars(ax, groups, series) -> None:
    """Bars for `series` = [(label, values, lows, highs, style)] side by side within each group."""
    width = 0.8 / max(len(series), 1)
    x = np.arange(len(groups))
    for i, (label, values, lows, highs, style) in enumerate(series):
        values, lows, highs = (np.asarray(a, dtype=float) for a in (values, lows, highs))
        errors = np.abs(np.vstack([values - lows, highs - values]))
        errors = np.where(np.isnan(errors), 0.0, errors)
        ax.bar(
            x + (i - (len(series) - 1) / 2) * width,
            np.nan_to_num(values),
            width,
            yerr=errors,
            capsize=2,
            label=label,
            **style,
        )
    ax.set_xticks(x, groups, rotation=30, ha="right")
    ax.grid(axis="y", alpha=0.3)


def save_figure(fig: Figure, path: Path) -> Path:
    """Lay out and write `fig` as PNG at the reports' resolution (eval and training figures)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def run_colors(n: int) -> list:
    """One colour per run, in the order every report figure uses."""
    return [f"C{i % 10}" for i in range(n)]


def _series(runs, groups, path, scale=100.0):
    """Per-group (values, lows, highs) of the metric at `path`, times `scale`, for each run."""
    out = []
    for _, summary in runs:
        rows = np.array([metric_at(summary_section(summary, g), path) for g in groups]) * scale
        out.append((rows[:, 0], rows[:, 1], rows[:, 2]))
    return out


def plot_accuracy_by_mode(runs: Sequence[RunSummary], path: Path) -> Path:
    """Grouped bars: accuracy (%) per benchmark, one bar per run × mode, 95 % CI whiskers."""
    groups = [*benchmark_names(runs), OVERALL]
    modes = [m for m in MODE_MARKERS if any(m in s["overall"]["modes"] for _, s in runs)]
    series = []
    for color, (label, summary) in zip(run_colors(len(runs)), runs, strict=True):
        for mode in modes:
            (values, lows, highs), *_ = _series(
                [(label, summary)], groups, ("modes", mode, "accuracy")
            )
            style = {
                "color": color,
                "hatch": MODE_HATCH[mode],
                "edgecolor": "black",
                "linewidth": 0.5,
            }
            series.append((f"{label} · {mode}", values, lows, highs, style))
    fig = Figure(figsize=(max(6.0, 1.2 * len(groups) * max(1, len(series)) / 2), 4.2))
    ax = fig.subplots()
    _grouped_bars(ax, groups, series)
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 105)  # a percentage axis, also when every value is 0
    ax.set_title("Accuracy by mode")
    if series:  # a run whose every item failed has no bars to name
        ax.legend(fontsize=7, ncol=2)
    return save_figure(fig, path)


def plot_gain_harm(runs: Sequence[RunSummary], path: Path) -> Path:
    """Gain (up) and harm (down, negative) bars per benchmark and run; Δ_TE as a black diamond."""
    groups = [*benchmark_names(runs), OVERALL]
    fig = Figure(figsize=(max(6.0, 0.9 * len(groups) * len(runs)), 4.2))
    ax = fig.subplots()
    width = 0.8 / len(runs)
    x = np.arange(len(groups))
    gains = _series(runs, groups, ("adaptivity", "gain"))
    harms = _series(runs, groups, ("adaptivity", "harm"))
    deltas = _series(runs, groups, ("adaptivity", "delta_te"))
    for i, (color, (label, _)) in enumerate(zip(run_colors(len(runs)), runs, strict=True)):
        pos = x + (i - (len(runs) - 1) / 2) * width
        ax.bar(pos, np.nan_to_num(gains[i][0]), width, color=color, label=f"{label} gain")
        ax.bar(
            pos,
            -np.nan_to_num(harms[i][0]),
            width,
            color=color,
            alpha=0.45,
            hatch="xx",
            label=f"{label} harm",
        )
        ax.scatter(pos, deltas[i][0], marker="D", color="black", s=14, zorder=3)
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xticks(x, groups, rotation=30, ha="right")
    ax.set_ylabel("gain P[✓tool|✗notool], harm P[✗tool|✓notool] (drawn negative); ◆ = Δ_TE")
    ax.set_title("Gain vs harm of tool use")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return save_figure(fig, path)


def plot_tool_rate(runs: Sequence[RunSummary], path: Path) -> Path:
    """Tool-call rate (%) in tool mode per benchmark and run; triangles (not the dashes of the CI
    whiskers) mark P[tool | easy] (gray ▼) and P[tool | hard] (black ▲), whose gap is what mode
    adaptiveness rewards."""
    groups = [*benchmark_names(runs), OVERALL]
    rates = _series(runs, groups, ("modes", "tool", "tool_rate"))
    series = [
        (label, *rate, {"color": color})
        for color, (label, _), rate in zip(run_colors(len(runs)), runs, rates, strict=True)
    ]
    fig = Figure(figsize=(max(6.0, 0.9 * len(groups) * len(runs)), 4.2))
    ax = fig.subplots()
    _grouped_bars(ax, groups, series)
    width = 0.8 / len(runs)
    no_tool_easy = _series(runs, groups, ("adaptivity", "p_notool_given_easy"))
    tool_hard = _series(runs, groups, ("adaptivity", "p_tool_given_hard"))
    for i in range(len(runs)):
        pos = np.arange(len(groups)) + (i - (len(runs) - 1) / 2) * width
        first = i == 0
        ax.scatter(
            pos,
            100.0 - no_tool_easy[i][0],
            marker="v",
            color="gray",
            s=30,
            zorder=3,
            label="P[tool | easy]" if first else None,
        )
        ax.scatter(
            pos,
            tool_hard[i][0],
            marker="^",
            color="black",
            s=30,
            zorder=3,
            label="P[tool | hard]" if first else None,
        )
    ax.set_ylabel("episodes with a tool call (%)")
    ax.set_ylim(0, 105)  # a percentage axis, also when every value is 0
    ax.set_title("Tool-call rate (tool mode)")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def plot_accuracy_vs_length(runs: Sequence[RunSummary], path: Path) -> Path:
    """Accuracy vs mean response tokens, one point per run × benchmark × mode (ReVuE Fig. 5)."""
    fig = Figure(figsize=(6.4, 4.6))
    ax = fig.subplots()
    for color, (_, summary) in zip(run_colors(len(runs)), runs, strict=True):
        for bench, section in summary["benchmarks"].items():
            for mode, stats in section["modes"].items():
                accuracy, tokens = stats.get("accuracy"), stats.get("response_tokens")
                if accuracy is None or tokens is None:
                    continue
                ax.scatter(
                    tokens, 100 * accuracy, color=color, marker=MODE_MARKERS.get(mode, "x"), s=36
                )
                ax.annotate(
                    bench,
                    (tokens, 100 * accuracy),
                    fontsize=6,
                    xytext=(3, 3),
                    textcoords="offset points",
                )
    handles = [
        ax.scatter([], [], color=c, marker="o", label=label)
        for c, (label, _) in zip(run_colors(len(runs)), runs, strict=True)
    ]
    modes = {mode for _, s in runs for b in s["benchmarks"].values() for mode in b["modes"]}
    handles += [
        ax.scatter([], [], color="gray", marker=m, label=mode)
        for mode, m in MODE_MARKERS.items()
        if mode in modes
    ]
    ax.legend(handles=handles, fontsize=7)
    ax.set_xlabel("mean response length (tokens)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title("Accuracy vs response length")
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


PLOTS = {
    "accuracy_by_mode": plot_accuracy_by_mode,
    "gain_harm": plot_gain_harm,
    "tool_rate": plot_tool_rate,
    "accuracy_vs_length": plot_accuracy_vs_length,
}
"""Every report figure by file stem, in report order."""


def plot_all(runs: Sequence[RunSummary], out_dir: Path) -> dict[str, Path]:
    """Draw every figure of `PLOTS` into ``out_dir/<name>.png``; returns {name: path}."""
    return {name: plot(runs, out_dir / f"{name}.png") for name, plot in PLOTS.items()}
