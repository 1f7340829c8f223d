"""`beacon train sft|grpo|opd|rft --config FILE [--set key=value ...] [--resume] [--dry-run]`.

Every trainer prints its memory plan first (`beacon.train.core.memory_check`); `--dry-run` prints
only the plan, for the launch given by `--processes` / `--sharding` (default: this one).

Launch on many processes through accelerate, e.g.
``accelerate launch --config_file configs/accelerate/fsdp.yaml -m beacon train sft --config ...``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer

from beacon.config import load_config

app = typer.Typer(
    help="Train a model: cold-start SFT, GRPO with NAAR and HGCE, OPD (ReVuE), RFT.",
    no_args_is_help=True,
)

CONFIG = typer.Option(..., "--config", "-c", help="YAML file of the trainer's config.")
SETS = typer.Option([], "--set", help="Override one key: train.lr=2e-5 (YAML value).")
RESUME = typer.Option(
    False, "--resume", help="Continue the run in train.output_dir from its newest checkpoint."
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
    from beacon.train.core.memory_check import DEVICE_MEMORY_ENV, check_plan, current_launch
    from beacon.train.core.memory_plan import SHARDINGS

    if device_memory_gb is not None:
        os.environ[DEVICE_MEMORY_ENV] = str(device_memory_gb)
    if not dry_run:
        if processes is not None or sharding is not None:
            raise typer.BadParameter(
                "--processes and --sharding plan a --dry-run; a run takes both from its launch "
                "(accelerate launch --num_processes N --config_file examples/accelerate/...)"
            )
        return False
    if sharding is not None and sharding not in SHARDINGS:
        raise typer.BadParameter(f"--sharding {sharding!r}: choose one of {', '.join(SHARDINGS)}")
    check_plan(cfg, current_launch(cfg.model, processes, sharding), title)  # type: ignore[arg-type]
    return True


SFT_EPILOG = """
Example (tiny model, CPU):

  beacon train sft --config configs/train/sft_tiny.yaml --set train.output_dir=runs/sft

Rerun with --resume to continue from the newest complete checkpoint.
"""


@app.command("sft", epilog=SFT_EPILOG)
def sft_command(
    config: Path = CONFIG,
    sets: list[str] = SETS,
    resume: bool = RESUME,
    dry_run: bool = DRY_RUN,
    device_memory_gb: float = DEVICE_MEMORY,
    processes: int = PROCESSES,
    sharding: str = SHARDING,
) -> None:
    """Cold-start SFT: cross-entropy on generated segments of trajectories."""
    from beacon.train.sft import SFTConfig, run_sft

    cfg = load_config(SFTConfig, config, sets)
    if not plan_only(cfg, "beacon train sft", dry_run, device_memory_gb, processes, sharding):
        run_sft(cfg, resume=resume)


GRPO_EPILOG = """
Example (tiny model on synth, CPU):

  beacon train grpo --config configs/train/grpo_tiny.yaml --set train.output_dir=runs/grpo

Ablations: --set rl.reward=binary (GRPO only), rl.reward=naar (+NAAR), rl.hgce.enabled=true
(+HGCE). Rerun with --resume to continue from the newest complete checkpoint.
"""


@app.command("grpo", epilog=GRPO_EPILOG)
def grpo_command(
    config: Path = CONFIG,
    sets: list[str] = SETS,
    resume: bool = RESUME,
    dry_run: bool = DRY_RUN,
    device_memory_gb: float = DEVICE_MEMORY,
    processes: int = PROCESSES,
    sharding: str = SHARDING,
) -> None:
    """GRPO with the NAAR reward and HGCE hints, rollouts through the agent loop."""
    from beacon.train.grpo import GRPOConfig, run_grpo

    cfg = load_config(GRPOConfig, config, sets)
    if not plan_only(cfg, "beacon train grpo", dry_run, device_memory_gb, processes, sharding):
        run_grpo(cfg, resume=resume)


OPD_EPILOG = """
Example (tiny student and teacher, CPU, the scripted synth critic over local HTTP):

  beacon tiny make runs/tiny-student --seed 0 && beacon tiny make runs/tiny-teacher --seed 1
  beacon train opd --config configs/train/opd_tiny.yaml
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
    dry_run: bool = DRY_RUN,
    device_memory_gb: float = DEVICE_MEMORY,
    processes: int = PROCESSES,
    sharding: str = SHARDING,
) -> None:
    """On-policy distillation with ReVuE: critic reflections and token-impact weights."""
    from beacon.train.opd import OPDConfig, run_opd

    cfg = load_config(OPDConfig, config, sets)
    if not plan_only(cfg, "beacon train opd", dry_run, device_memory_gb, processes, sharding):
        run_opd(cfg, resume=resume)


RFT_EPILOG = """
Example (tiny student on CPU; a scripted synth teacher that is right):

  beacon tiny make runs/tiny-student --seed 0
  beacon data scripted-expert --port 8011 &
  beacon train rft --config configs/train/rft_tiny_scripted.yaml
  beacon train rft --config configs/train/rft_tiny_scripted.yaml --resume

configs/train/rft_tiny.yaml samples opd_tiny.yaml's random tiny teacher
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
    dry_run: bool = DRY_RUN,
    device_memory_gb: float = DEVICE_MEMORY,
    processes: int = PROCESSES,
    sharding: str = SHARDING,
) -> None:
    """RFT: SFT the student on the teacher's verified trajectories (sample, verify, sft)."""
    from beacon.data.records import StageSummary
    from beacon.eval.runner import InfrastructureErrors
    from beacon.train.rft import RFTConfig, run_rft

    cfg = load_config(RFTConfig, config, sets)
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
