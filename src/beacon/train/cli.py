"""`beacon train sft|grpo|opd|rft --config FILE [--set key=value ...] [--resume] [--no-progress]`.

Launch on many processes through accelerate, e.g.
``accelerate launch --config_file configs/accelerate/fsdp.yaml -m beacon train sft --config ...``.
"""

from __future__ import annotations

from pathlib import Path

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
NO_PROGRESS = typer.Option(
    False, "--no-progress", help="No progress display (sets train.progress_bar=false)."
)
"""The options every train command takes; a bad config or run folder is one line, exit 2
(`beacon.cli.main`)."""


def _overrides(sets: list[str], no_progress: bool) -> list[str]:
    """The `--set` overrides, then `--no-progress` as the one it stands for."""
    return [*sets, "train.progress_bar=false"] if no_progress else sets


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
    no_progress: bool = NO_PROGRESS,
) -> None:
    """Cold-start SFT: cross-entropy on generated segments of trajectories."""
    from beacon.train.sft import SFTConfig, run_sft

    run_sft(load_config(SFTConfig, config, _overrides(sets, no_progress)), resume=resume)


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
    no_progress: bool = NO_PROGRESS,
) -> None:
    """GRPO with the NAAR reward and HGCE hints, rollouts through the agent loop."""
    from beacon.train.grpo import GRPOConfig, run_grpo

    run_grpo(load_config(GRPOConfig, config, _overrides(sets, no_progress)), resume=resume)


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
    no_progress: bool = NO_PROGRESS,
) -> None:
    """On-policy distillation with ReVuE: critic reflections and token-impact weights."""
    from beacon.train.opd import OPDConfig, run_opd

    run_opd(load_config(OPDConfig, config, _overrides(sets, no_progress)), resume=resume)


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
    no_progress: bool = NO_PROGRESS,
) -> None:
    """RFT: SFT the student on the teacher's verified trajectories (sample, verify, sft)."""
    from beacon.data.records import StageSummary
    from beacon.eval.runner import InfrastructureErrors
    from beacon.train.rft import RFTConfig, run_rft

    try:
        summary = run_rft(
            load_config(RFTConfig, config, _overrides(sets, no_progress)), resume=resume
        )
    except InfrastructureErrors as exc:  # teacher server down: rerun with --resume retries them
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    for counts in summary.values():
        typer.echo(StageSummary(**counts).line())
