"""`beacon train sft --config FILE [--set key=value ...] [--resume]`.

Launch on many processes through accelerate, e.g.
``accelerate launch --config_file configs/accelerate/fsdp.yaml -m beacon train sft --config ...``.
"""

from __future__ import annotations

from pathlib import Path

import typer

from beacon.train.config import TrainConfigError

app = typer.Typer(help="Train a model: cold-start SFT, OPD (ReVuE).", no_args_is_help=True)

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
    from beacon.train.config import SFTConfig, load_train_config
    from beacon.train.sft import run_sft

    try:
        cfg = load_train_config(SFTConfig, config, sets)
    except TrainConfigError as exc:
        raise typer.BadParameter(str(exc)) from None
    run_sft(cfg, resume=resume)


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
    from beacon.train.config import load_train_config
    from beacon.train.opd import run_opd
    from beacon.train.opd_config import OPDConfig

    try:
        cfg = load_train_config(OPDConfig, config, sets)
    except TrainConfigError as exc:
        raise typer.BadParameter(str(exc)) from None
    run_opd(cfg, resume=resume)
