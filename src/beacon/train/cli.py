"""`beacon train sft|grpo|opd|rft --config NAME|FILE [--set key=value ...] [--resume]
[--no-progress] [--show-config] [--dry-run]`.

Every trainer prints its memory plan first (`beacon.train.core.memory`); `--dry-run` prints
only the plan, for the launch given by `--processes` / `--sharding` (default: this one).

Launch on many processes through accelerate, e.g. ``beacon configs cp fsdp . && accelerate
launch --config_file fsdp.yaml -m beacon train sft --config ...``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TypeVar

import typer
from pydantic import BaseModel

from beacon.config import format_describe, load_config
from beacon.configs.cli import config_option
from beacon.data.records import StageSummary
from beacon.engines.serve_guard import exposure_warning
from beacon.errors import UserError
from beacon.eval.runner import InfrastructureErrors
from beacon.train.core.memory import DEVICE_MEMORY_ENV, SHARDINGS, check_plan, current_launch

app = typer.Typer(
    help="Train a model: cold-start SFT, GRPO with NAAR and HGCE, OPD (ReVuE), RFT.",
    no_args_is_help=True,
)

CONFIG = config_option("The trainer's config.")
SETS = typer.Option([], "--set", help="Override one key: train.lr=2e-5 (YAML value).")
RESUME = typer.Option(
    False, "--resume", help="Continue the run in train.output_dir from its newest checkpoint."
)
NO_PROGRESS = typer.Option(
    False, "--no-progress", help="No progress display (sets train.progress_bar=false)."
)
SHOW = typer.Option(
    False,
    "--show-config",
    metavar="",
    help="Print every setting as resolved (--config, --set applied) with its help and exit; "
    "without --config, the defaults.",
)
"""The options every train command takes; a bad config or run folder is one line, exit 2
(`beacon.cli.main`)."""
DRY_RUN = typer.Option(
    False, "--dry-run", help="Print the memory plan and exit: nothing is loaded or written."
)
DEVICE_MEMORY = typer.Option(
    None,
    "--device-memory-gb",
    help="Memory (GB) of each device the plan checks against; default: the GPU's, on CPU the "
    "RAM shared by the node's processes.",
)
PROCESSES = typer.Option(None, "--processes", help="--dry-run: processes (devices) to plan for.")
SHARDING = typer.Option(
    None, "--sharding", help="--dry-run: none, ddp, fsdp, zero1, zero2 or zero3 to plan for."
)
"""The memory plan's options (`plan_only`)."""


def plan_only(
    cfg: Any,
    title: str,
    dry_run: bool,
    device_memory_gb: float | None,
    processes: int | None,
    sharding: str | None,
) -> bool:
    """Whether the command ends here: with `dry_run`, the plan printed. The device memory goes
    to every process of a launch through $BEACON_DEVICE_MEMORY_GB."""
    if device_memory_gb is not None:
        os.environ[DEVICE_MEMORY_ENV] = str(device_memory_gb)
    if not dry_run:
        if processes is not None or sharding is not None:
            raise typer.BadParameter(
                "--processes and --sharding plan a --dry-run; a run takes both from its launch "
                "(accelerate launch --num_processes N --config_file fsdp.yaml, the file from "
                "`beacon configs cp fsdp .`)"
            )
        return False
    if sharding is not None and sharding not in SHARDINGS:
        raise typer.BadParameter(f"--sharding {sharding!r}: choose one of {', '.join(SHARDINGS)}")
    launch = current_launch(cfg.model, processes, sharding)  # type: ignore[arg-type]
    check_plan(cfg, launch, title, typer.echo)
    return True


M = TypeVar("M", bound=BaseModel)


def _config(
    cls: type[M],
    command: str,
    config: Path | None,
    sets: list[str],
    *,
    no_progress: bool,
    show: bool,
) -> M:
    """The command's resolved config (--no-progress as the `--set` it stands for); with
    --show-config, print it and exit instead."""
    sets = [*sets, "train.progress_bar=false"] if no_progress else sets
    if show:
        resolved = load_config(cls, config, sets) if config is not None or sets else None
        typer.echo(format_describe(cls, resolved))
        raise typer.Exit()
    if config is None:
        raise UserError(
            f"beacon train {command} needs --config: a YAML file or a shipped config's name, e.g. "
            f"--config {command}_tiny (`beacon configs list` shows them)"
        )
    return load_config(cls, config, sets)


SFT_EPILOG = """
Example (tiny model, CPU):

  beacon train sft --config sft_tiny --set train.output_dir=runs/sft

Rerun with --resume to continue from the newest complete checkpoint.
"""


@app.command("sft", epilog=SFT_EPILOG)
def sft_command(
    config: Path = CONFIG,
    sets: list[str] = SETS,
    resume: bool = RESUME,
    no_progress: bool = NO_PROGRESS,
    show: bool = SHOW,
    dry_run: bool = DRY_RUN,
    device_memory_gb: float = DEVICE_MEMORY,
    processes: int = PROCESSES,
    sharding: str = SHARDING,
) -> None:
    """Cold-start SFT: cross-entropy on generated segments of trajectories."""
    # lazy: torch stays out of `beacon --help`
    from beacon.train.sft import SFTConfig, run_sft

    cfg = _config(SFTConfig, "sft", config, sets, no_progress=no_progress, show=show)
    if not plan_only(cfg, "beacon train sft", dry_run, device_memory_gb, processes, sharding):
        run_sft(cfg, resume=resume)


GRPO_EPILOG = """
Example (tiny model on synth, CPU):

  beacon train grpo --config grpo_tiny --set train.output_dir=runs/grpo

Ablations: --set rl.reward=binary (GRPO only), rl.reward=naar (+NAAR), rl.hgce.enabled=true
(+HGCE). Rerun with --resume to continue from the newest complete checkpoint.
"""


@app.command("grpo", epilog=GRPO_EPILOG)
def grpo_command(
    config: Path = CONFIG,
    sets: list[str] = SETS,
    resume: bool = RESUME,
    no_progress: bool = NO_PROGRESS,
    show: bool = SHOW,
    dry_run: bool = DRY_RUN,
    device_memory_gb: float = DEVICE_MEMORY,
    processes: int = PROCESSES,
    sharding: str = SHARDING,
) -> None:
    """GRPO with the NAAR reward and HGCE hints, rollouts through the agent loop."""
    # lazy: torch stays out of `beacon --help`
    from beacon.train.grpo import GRPOConfig, run_grpo

    cfg = _config(GRPOConfig, "grpo", config, sets, no_progress=no_progress, show=show)
    if not plan_only(cfg, "beacon train grpo", dry_run, device_memory_gb, processes, sharding):
        run_grpo(cfg, resume=resume)


OPD_EPILOG = """
Example (tiny student and teacher, CPU, the scripted synth critic over local HTTP):

  beacon tiny make runs/tiny-student --seed 0 && beacon tiny make runs/tiny-teacher --seed 1
  beacon train opd --config opd_tiny
  beacon revue analyze runs/opd-tiny

Variants: --set teacher.context=base|gt|reflection, --set revue.weighting=revue|uniform|...
Before step 1 the teacher check (teacher_check.json) stops a run whose teacher is no better
than the student; --resume --set teacher_check.on_fail=warn trains anyway.
"""


@app.command("opd", epilog=OPD_EPILOG)
def opd_command(
    config: Path = CONFIG,
    sets: list[str] = SETS,
    resume: bool = RESUME,
    no_progress: bool = NO_PROGRESS,
    show: bool = SHOW,
    dry_run: bool = DRY_RUN,
    device_memory_gb: float = DEVICE_MEMORY,
    processes: int = PROCESSES,
    sharding: str = SHARDING,
) -> None:
    """On-policy distillation with ReVuE: critic reflections and token-impact weights."""
    # lazy: torch stays out of `beacon --help`
    from beacon.train.opd import OPDConfig, run_opd

    cfg = _config(OPDConfig, "opd", config, sets, no_progress=no_progress, show=show)
    if not plan_only(cfg, "beacon train opd", dry_run, device_memory_gb, processes, sharding):
        run_opd(cfg, resume=resume)


RFT_EPILOG = """
Example (tiny student on CPU; a scripted synth teacher that is right):

  beacon tiny make runs/tiny-student --seed 0
  beacon data scripted-expert --port 8011 &
  beacon train rft --config rft_tiny_scripted
  beacon train rft --config rft_tiny_scripted --resume

--config rft_tiny samples opd_tiny's random tiny teacher
instead (it verifies nothing, and the run says so).
Stages: sample the teacher (teacher/), keep verified answers (verified/),
SFT the student (sft/); counts per stage in summary.json. --resume skips
finished stages and continues an unfinished one.
"""


@app.command("rft", epilog=RFT_EPILOG)
def rft_command(
    config: Path = CONFIG,
    sets: list[str] = SETS,
    resume: bool = RESUME,
    no_progress: bool = NO_PROGRESS,
    show: bool = SHOW,
    dry_run: bool = DRY_RUN,
    device_memory_gb: float = DEVICE_MEMORY,
    processes: int = PROCESSES,
    sharding: str = SHARDING,
) -> None:
    """RFT: SFT the student on the teacher's verified trajectories (sample, verify, sft)."""
    # lazy: torch stays out of `beacon --help`
    from beacon.train.rft import RFTConfig, run_rft

    cfg = _config(RFTConfig, "rft", config, sets, no_progress=no_progress, show=show)
    if plan_only(
        cfg, "beacon train rft (its SFT stage)", dry_run, device_memory_gb, processes, sharding
    ):
        return
    try:
        summary = run_rft(cfg, resume=resume)
    except InfrastructureErrors as exc:  # teacher server down: rerun with --resume retries them
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    for counts in summary.values():
        typer.echo(StageSummary(**counts).line())


# `beacon revue serve-teacher`: `beacon.cli` registers it under `revue`; it lives here, beside the
# teacher server it starts, so the revue room imports nothing from training.
def serve_teacher_command(
    model: str = typer.Option(..., "--model", help="Teacher checkpoint folder."),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8001, "--port"),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
    api_key: str = typer.Option(
        None,
        "--api-key",
        envvar="BEACON_API_KEY",
        help="Every route needs 'Authorization: Bearer KEY' (clients: teacher.api_key_env).",
    ),
) -> None:
    """Serve an OPD teacher: top-K log-probs on given tokens at /v1/score (teacher.base_url)."""
    import uvicorn

    # lazy: torch stays out of `beacon --help`
    from beacon.train.opd.teacher_server import create_teacher_app

    warning = exposure_warning(host, api_key)
    if warning is not None:
        typer.secho(warning, err=True, fg=typer.colors.RED, bold=True)
    server = create_teacher_app(model, device, api_key)
    uvicorn.run(server, host=host, port=port, log_level="warning")
