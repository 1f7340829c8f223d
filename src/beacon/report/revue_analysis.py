"""`beacon revue analyze RUN`: impact sparsity and reflection coverage of an OPD run, from its logs.

Reads the run folder `beacon train opd` writes: `revue.jsonl` (one line per supervised trajectory:
step, slot, whether q^R was adopted, fallbacks, token impacts), `metrics.jsonl` (per-step coverage
and stage counts) and `critic.jsonl` (every raw critic exchange). Impact sparsity is recomputed from
the logged impacts with `beacon.train.opd.assemble.impact_sparsity` (share of pooled impact in the
top 20% of positions; Figure 4), per step and over the whole run.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer

from beacon.jsonl import read_jsonl
from beacon.runfolder import CRITIC_LOG, METRICS_FILE, REVUE_LOG

app = typer.Typer(help="ReVuE tools: analyse an OPD run.", no_args_is_help=True)


@dataclass
class RunAnalysis:
    """What `analyze_run` found; `per_step` rows hold step, sparsity and coverage counts."""

    steps: int
    trajectories: int
    impact_sparsity: float | None
    coverage: dict[str, int]
    stages: dict[str, int]
    target_fallbacks: dict[str, int]
    critic_exchanges: int
    critic_errors: int
    per_step: list[dict[str, Any]] = field(default_factory=list)


def _read(path: Path) -> list[dict[str, Any]]:
    return list(read_jsonl(path))


def _sum_prefixed(rows: list[dict[str, Any]], prefix: str) -> dict[str, int]:
    totals: Counter[str] = Counter()
    for row in rows:
        for key, value in row.items():
            if key.startswith(prefix) and isinstance(value, int):
                totals[key.removeprefix(prefix)] += value
    return dict(totals)


def analyze_run(run_dir: Path) -> RunAnalysis:
    """Statistics of the OPD run in `run_dir` (see the module docstring)."""
    import torch

    # lazy: torch stays out of `beacon --help`
    from beacon.train.opd.assemble import impact_sparsity

    records = _read(run_dir / REVUE_LOG)
    metrics = _read(run_dir / METRICS_FILE)
    exchanges = _read(run_dir / CRITIC_LOG)
    if not records and not metrics:
        raise FileNotFoundError(
            f"{run_dir} has no {REVUE_LOG} or {METRICS_FILE}; pass the train.output_dir of a "
            "`beacon train opd` run"
        )

    def sparsity(rows: list[dict[str, Any]]) -> float | None:
        return impact_sparsity(torch.tensor(r["impact"]) for r in rows if r.get("impact"))

    per_step = []
    for row in metrics:
        step_records = [r for r in records if r["step"] == row["step"]]
        coverage = {k.removeprefix("coverage_"): v for k, v in row.items() if "coverage_" in k}
        per_step.append(
            {"step": row["step"], "impact_sparsity": sparsity(step_records), **coverage}
        )
    fallbacks = Counter(r.get("target_fallback") or "reflected" for r in records)
    return RunAnalysis(
        steps=len(metrics),
        trajectories=len(records),
        impact_sparsity=sparsity(records),
        coverage=_sum_prefixed(metrics, "coverage_"),
        stages=_sum_prefixed(metrics, "stage_"),
        target_fallbacks=dict(fallbacks),
        critic_exchanges=len(exchanges),
        critic_errors=sum(1 for e in exchanges if e.get("error")),
        per_step=per_step,
    )


def format_analysis(a: RunAnalysis) -> str:
    """The analysis as plain-text tables."""
    sparsity = "n/a" if a.impact_sparsity is None else f"{a.impact_sparsity:.1%}"
    lines = [
        f"steps: {a.steps}   supervised trajectories: {a.trajectories}",
        f"impact sparsity (share of impact in the top 20% of positions): {sparsity}",
        "",
        "reflection coverage (rollout slots):",
    ]
    total = max(sum(a.coverage.values()), 1)
    for key, count in a.coverage.items():
        lines.append(f"  {key:<16}{count:>7}  {count / total:6.1%}")
    lines.append("teacher target: " + ", ".join(f"{k} {v}" for k, v in a.target_fallbacks.items()))
    lines.append("stages: " + ", ".join(f"{k} {v}" for k, v in a.stages.items()))
    lines.append(f"critic exchanges: {a.critic_exchanges} ({a.critic_errors} with an error)")
    lines += ["", f"{'step':>5} {'sparsity':>9} " + " ".join(f"{k[:8]:>8}" for k in a.coverage)]
    for row in a.per_step:
        s = row["impact_sparsity"]
        cells = " ".join(f"{row.get(k, 0):>8}" for k in a.coverage)
        lines.append(f"{row['step']:>5} {'n/a' if s is None else f'{s:.3f}':>9} {cells}")
    return "\n".join(lines)


@app.command("analyze")
def analyze(
    run: Path = typer.Argument(..., help="Run folder of `beacon train opd` (train.output_dir)."),
    as_json: bool = typer.Option(False, "--json", help="Print the statistics as JSON."),
) -> None:
    """Print impact sparsity and reflection coverage statistics of an OPD run."""
    try:
        result = analyze_run(run)
    except FileNotFoundError as exc:
        raise typer.BadParameter(str(exc)) from None
    if as_json:
        from dataclasses import asdict

        typer.echo(json.dumps(asdict(result), indent=2))
    else:
        typer.echo(format_analysis(result))
