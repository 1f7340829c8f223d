"""`beacon train sft|grpo|opd|rft --config FILE [--set key=value ...] [--resume]`.

Launch on many processes through accelerate, e.g.
``accelerate launch --config_file configs/accelerate/fsdp.yaml -m beacon train sft --config ...``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import typer

if TYPE_CHECKING:
    from pydantic import BaseModel

    Config = TypeVar("Config", bound=BaseModel)

app = typer.Typer(
    help="Train a model: cold-start SFT, GRPO with NAAR and HGCE, OPD (ReVuE), RFT.",
    no_args_is_help=True,
)


def _load(cls: type[Config], config: Path, sets: list[str]) -> Config:
    """The resolved config; every problem printed, exit 2 (one path for all train commands)."""
    from beacon.config import ConfigError, load_config

    try:
        return load_config(cls, config, sets)
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None


@contextlib.contextmanager
def _run_folder_errors() -> Iterator[None]:
    """A run folder that cannot be used with this config: one line, exit 2."""
    from beacon.train.core.rundir import RunFolderError

    try:
        yield
    except RunFolderError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


TRAIN_EPILOG = """
Example (tiny model, CPU):

  beacon train sft --config configs/train/sft_tiny.yaml --set train.output_dir=runs/sft

Rerun with --resume to continue from the newest complete checkpoint.
"""


@app.command("sft", epilog=TRAIN_EPILOG)
def sft_command(
    config: Path = typer.Option(..., "--config", "-c", help="YAML file of an SFTConfig."),
    sets: list[str] = typer.Option([], "--set", help="Override one key: train.lr=2e-5."),
    resume: bool = typer.Option(
        False, "--resume", help="Continue the run in train.output_dir from its newest checkpoint."
    ),
) -> None:
    """Cold-start SFT: cross-entropy on generated segments of trajectories."""
    from beacon.train.sft import SFTConfig, run_sft

    cfg = _load(SFTConfig, config, sets)
    with _run_folder_errors():
        run_sft(cfg, resume=resume)


GRPO_EPILOG = """
Example (tiny model on synth, CPU):

  beacon train grpo --config configs/train/grpo_tiny.yaml --set train.output_dir=runs/grpo

Ablations: --set rl.reward=binary (GRPO only), rl.reward=naar (+NAAR), rl.hgce.enabled=true
(+HGCE). Rerun with --resume to continue from the newest complete checkpoint.
"""


@app.command("grpo", epilog=GRPO_EPILOG)
def grpo_command(
    config: Path = typer.Option(..., "--config", "-c", help="YAML file of a GRPOConfig."),
    sets: list[str] = typer.Option([], "--set", help="Override one key: rl.reward=binary."),
    resume: bool = typer.Option(
        False, "--resume", help="Continue the run in train.output_dir from its newest checkpoint."
    ),
) -> None:
    """GRPO with the NAAR reward and HGCE hints, rollouts through the agent loop."""
    from beacon.train.grpo import GRPOConfig, run_grpo

    cfg = _load(GRPOConfig, config, sets)
    with _run_folder_errors():
        run_grpo(cfg, resume=resume)


OPD_EPILOG = """
Example (tiny student and teacher, CPU, the scripted synth critic over local HTTP):

  beacon tiny make runs/tiny-student --seed 0 && beacon tiny make runs/tiny-teacher --seed 1
  beacon train opd --config configs/train/opd_tiny.yaml
  beacon revue analyze runs/opd-tiny

Variants: --set teacher.context=base|gt|reflection, --set revue.weighting=revue|uniform|...
"""


@app.command("opd", epilog=OPD_EPILOG)
def opd_command(
    config: Path = typer.Option(..., "--config", "-c", help="YAML file of an OPDConfig."),
    sets: list[str] = typer.Option([], "--set", help="Override one key: revue.alpha=0.1."),
    resume: bool = typer.Option(
        False, "--resume", help="Continue the run in train.output_dir from its newest checkpoint."
    ),
) -> None:
    """On-policy distillation with ReVuE: critic reflections and token-impact weights."""
    from beacon.train.opd import OPDConfig, run_opd

    cfg = _load(OPDConfig, config, sets)
    with _run_folder_errors():
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
    config: Path = typer.Option(..., "--config", "-c", help="YAML file of an RFTConfig."),
    sets: list[str] = typer.Option([], "--set", help="Override one key: rollout.group_size=16."),
    resume: bool = typer.Option(
        False, "--resume", help="Continue the run in train.output_dir: finished stages are skipped."
    ),
) -> None:
    """RFT: SFT the student on the teacher's verified trajectories (sample, verify, sft)."""
    from beacon.data.records import StageSummary
    from beacon.eval.runner import InfrastructureErrors
    from beacon.train.rft import RFTConfig, run_rft

    cfg = _load(RFTConfig, config, sets)
    try:
        with _run_folder_errors():
            summary = run_rft(cfg, resume=resume)
    except InfrastructureErrors as exc:  # teacher server down: rerun with --resume retries them
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    for counts in summary.values():
        typer.echo(StageSummary(**counts).line())
