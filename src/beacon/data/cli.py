"""`beacon data ...`: the training-data stages, each resumable, each with a summary.json.

beacon data scripted-expert --port 8011 &          # offline expert for synth (tests, demos)
beacon data difficulty -c synth_tiny                # a shipped config's name, or a YAML file
beacon data expert     -c synth_tiny
beacon data hints      -c synth_tiny
beacon data all        -c synth_tiny                # the three above, each unless finished
beacon data import-thyme thyme_sft.jsonl --images /data/thyme --out runs/thyme-sft
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from beacon.config import format_describe
from beacon.configs.cli import config_option
from beacon.data.config import DataConfig, DataConfigError, load_data_config
from beacon.data.eval_stages import run_difficulty, run_expert
from beacon.data.records import StageSummary
from beacon.data.thyme import import_thyme
from beacon.runfolder import read_summary
from beacon.stages import Stage, run_stages

if TYPE_CHECKING:
    from beacon.data.config import DataConfig
    from beacon.stages import Stage

app = typer.Typer(
    no_args_is_help=True,
    help="Build training data: pass@k difficulty, expert trajectories, hints, Thyme import.",
)

CONFIG = config_option("The data config (e.g. synth_tiny).")
SET = typer.Option([], "--set", help="Override a setting: a.b=value (repeatable).")
NO_PROGRESS = typer.Option(False, "--no-progress", help="No progress bar.")
SHOW = typer.Option(
    False,
    "--show-config",
    metavar="",
    help="Print every setting as resolved (--config, --set applied) with its help and exit.",
)


def _load(config: Path | None, set_: list[str], show: bool) -> DataConfig:
    """The resolved data config; with --show-config, print it and exit instead."""
    try:
        cfg = load_data_config(config, list(set_))
    except (DataConfigError, FileNotFoundError) as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    if show:
        typer.echo(format_describe(DataConfig, cfg))
        raise typer.Exit()
    return cfg


def _run_stage(
    stage: Callable, config: Path | None, set_: list[str], no_progress: bool, show: bool
) -> None:
    cfg = _load(config, set_, show)
    try:
        summary = stage(cfg, progress=not no_progress)
    except (FileNotFoundError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(asdict(summary), indent=2))


@app.command("difficulty")
def difficulty(
    config: Path = CONFIG,
    set_: list[str] = SET,
    no_progress: bool = NO_PROGRESS,
    show: bool = SHOW,
) -> None:
    """Sample the base model K times per item; keep items it solves at most max_correct times."""
    _run_stage(run_difficulty, config, set_, no_progress, show)


@app.command("expert")
def expert(
    config: Path = CONFIG,
    set_: list[str] = SET,
    no_progress: bool = NO_PROGRESS,
    show: bool = SHOW,
) -> None:
    """The expert solves the selected items in tool mode; verified ones form the SFT set."""
    _run_stage(run_expert, config, set_, no_progress, show)


@app.command("hints")
def hints(
    config: Path = CONFIG,
    set_: list[str] = SET,
    no_progress: bool = NO_PROGRESS,
    show: bool = SHOW,
) -> None:
    """Answer-free hints from the verified expert trajectories; leaking hints are rejected."""
    # lazy: torch stays out of `beacon --help`
    from beacon.data.hint_writing import run_hints

    _run_stage(run_hints, config, set_, no_progress, show)


@app.command("all")
def all_stages(
    config: Path = CONFIG,
    set_: list[str] = SET,
    no_progress: bool = NO_PROGRESS,
    show: bool = SHOW,
) -> None:
    """Run difficulty, expert and hints in order, skipping each one that already finished."""
    cfg = _load(config, set_, show)
    stages = data_stages(cfg, progress=not no_progress)
    try:
        run_stages(stages, log=partial(typer.echo, err=True))
    except (FileNotFoundError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    for stage in stages:
        typer.echo(StageSummary(**read_summary(cfg.root / stage.name)).line())


def data_stages(cfg: DataConfig, progress: bool) -> list[Stage]:
    """The data pipeline in order. Each stage writes `summary.json` in its folder last, so a
    stage is done once that is there; one killed midway resumes from its eval run or its
    hints.jsonl. A finished stage is rerun by its own command (after a change of settings)."""
    # lazy: torch stays out of `beacon --help`
    from beacon.data.hint_writing import run_hints

    runs = {"difficulty": run_difficulty, "expert": run_expert, "hints": run_hints}
    return [
        Stage(
            name,
            partial(run, cfg, progress=progress),
            lambda folder=cfg.root / name: bool(read_summary(folder)),
        )
        for name, run in runs.items()
    ]


@app.command("scripted-expert")
def scripted_expert(
    seed: int = typer.Option(0, "--seed", help="The synth seed of the pool (pool.seed)."),
    count: int = typer.Option(100, "--count", help="Synth items it knows: 0..count-1."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on."),
    port: int = typer.Option(8011, "--port", help="TCP port."),
) -> None:
    """Serve the scripted synth expert (ground truth, not a model) over the OpenAI API."""
    import uvicorn

    # lazy: torch and fastapi stay out of `beacon --help`
    from beacon.data.scripted_expert import ScriptedSynthExpert, create_scripted_app

    app_ = create_scripted_app(ScriptedSynthExpert(seed=seed, count=count))
    uvicorn.run(app_, host=host, port=port, log_level="warning")


@app.command("import-thyme")
def import_thyme_command(
    source: Path = typer.Argument(..., help="Thyme SFT file (.jsonl or .json list)."),
    images: Path = typer.Option(
        None,
        "--images",
        help="Folder the rows' images are read from, and only from (relative paths start in "
        "it); default: the source file's folder.",
    ),
    out: Path = typer.Option(..., "--out", help="Output folder (trajectories.jsonl, images/)."),
    no_progress: bool = NO_PROGRESS,
) -> None:
    """Convert Thyme's public SFT format into Beacon trajectories the SFT trainer reads."""
    if not source.exists():
        typer.echo(f"error: {source} does not exist", err=True)
        raise typer.Exit(2)
    summary = import_thyme(source, out, image_root=images, progress=not no_progress)
    typer.echo(json.dumps(asdict(summary), indent=2))
