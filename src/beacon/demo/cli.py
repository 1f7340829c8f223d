"""`beacon demo`: train a tiny VLM from scratch and show Beacon's and ReVuE's effects."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from beacon.config import format_describe, load_config
from beacon.configs.cli import config_option
from beacon.demo.config import DemoConfig, quick_overrides
from beacon.demo.run import export_cold_start as export
from beacon.demo.run import run_demo

DEMO_EPILOG = """
Examples:

  beacon demo --quick                 # from the shipped cold start: NAAR vs accuracy-only GRPO

  beacon demo                         # the full demo: data, SFT, RL ablation, OPD / ReVuE

  beacon demo --seeds 5 --out runs/demo5 --set rl.steps=60

  beacon demo --export-cold-start src/beacon/demo/assets/cold_start   # remake what --quick ships

Rerunning the same command resumes where it stopped (also after kill -9).
"""

CONFIG = config_option("The demo config.")


def demo_command(
    quick: bool = typer.Option(
        False,
        "--quick",
        metavar="",
        help="Start from the shipped cold-start checkpoint: accuracy-only vs NAAR GRPO, one "
        "seed each, evaluated with intervals (a few minutes).",
    ),
    out: str = typer.Option(None, help="Demo folder (default runs/demo, runs/demo-quick)."),
    seeds: int = typer.Option(None, help="RL seeds per arm (default 3; --quick 1)."),
    config: Path = CONFIG,
    set_: list[str] = typer.Option([], "--set", help="Override a setting: a.b=value."),
    show_config: bool = typer.Option(
        False,
        "--show-config",
        metavar="",
        help="Print every setting as resolved (--quick, --config, --set applied) and exit.",
    ),
    no_progress: bool = typer.Option(False, "--no-progress", metavar="", help="No progress bars."),
    export_cold_start: Path = typer.Option(
        None,
        "--export-cold-start",
        help="Train (or resume) only the cold start and copy its checkpoint here, with the "
        "settings it was made with (what --quick starts from).",
    ),
) -> None:
    """Train a ~1.3M-parameter Qwen2-VL from scratch on CPU: scripted-expert data, tool-biased
    SFT, GRPO with accuracy / NAAR / HGCE rewards over seeds, ReVuE vs vanilla OPD distillation;
    then evaluate every model with and without tools and write report.md with CIs and plots."""
    overrides = quick_overrides() if quick else []
    overrides.append(f"out={out or ('runs/demo-quick' if quick else 'runs/demo')}")
    if seeds is not None:
        overrides.append(f"seeds={seeds}")
    if no_progress:
        overrides.append("progress=false")
    cfg = load_config(DemoConfig, path=config, overrides=[*overrides, *set_])
    if show_config:
        typer.echo(format_describe(DemoConfig, cfg))
        raise typer.Exit()
    start = time.perf_counter()
    if export_cold_start is not None:
        export(cfg, export_cold_start, log=lambda line: typer.echo(line, err=True))
        return
    report = run_demo(cfg, log=lambda line: typer.echo(line, err=True))
    typer.echo(f"demo finished in {(time.perf_counter() - start) / 60:.1f} min: {report}")
