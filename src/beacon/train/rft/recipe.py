"""`beacon train rft`: RFT, SFT on the teacher's correct trajectories (the ReVuE paper's RFT
baseline; docs/train.md, "RFT"). Wiring only: three existing components in a row.

1. **sample**: the teacher solves every training item M = `rollout.group_size` times in tool
   mode with OPD's rollout settings: one `beacon eval` run (`eval.runner.run_eval`) in
   `teacher/`, resumable from its samples.jsonl, with the runner's progress bar.
2. **verify**: keep the episodes whose answer the benchmark's verifier accepted
   (`data.stages.expert_drop_reason`, the expert stage's rule; counts by reason), in key order
   so a rerun trains on the same rows in the same order -> `verified/trajectories.jsonl`.
3. **sft**: `run_sft` on them (loss masks, checkpoints, exact resume) in `sft/`; its
   `checkpoint-N/` folders are models `beacon eval --model` loads.

The stages run through the one stage runner (`beacon.stages.run_stages`). `summary.json` holds
the `StageSummary` of every finished stage (total, kept, dropped by reason, seconds); a stage
listed there is done and skipped on rerun, an unfinished one resumes from its own records. The
resolved config is `config.yaml`; a resume with other settings is refused, naming the keys
(`config.RFT_OPERATIONAL_KEYS` may change).

Deviations and limits:
1. The teacher's episodes are seeded from `data.seed` (the eval runner draws items and seeds
   episodes from one seed), not `train.seed`, which seeds the SFT stage.
2. Under `accelerate launch` the sample and verify stages run on the main process while the
   others wait at a barrier, bounded by the process group's timeout (docs/train.md, "RFT");
   the SFT stage runs on every process.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from beacon.data.eval_stages import expert_drop_reason, run_trajectories, tag
from beacon.data.records import StageSummary
from beacon.engines.config import EngineConfig
from beacon.engines.registry import check_model
from beacon.errors import UserError
from beacon.eval.config import EvalConfig
from beacon.eval.runner import preflight, run_eval
from beacon.jsonl import write_jsonl_atomic
from beacon.runfolder import (
    check_run_folder,
    has_run,
    read_summary,
    write_run_config,
    write_summary,
)
from beacon.stages import Stage, run_stages
from beacon.train.rft.config import RFT_OPERATIONAL_KEYS, RFTConfig
from beacon.train.sft.config import DataConfig, SFTConfig
from beacon.train.sft.recipe import DATA_FILE, run_sft

logger = logging.getLogger(__name__)

TEACHER_DIR = "teacher"
VERIFIED_FILE = "verified/trajectories.jsonl"
SFT_DIR = "sft"


def teacher_eval_config(cfg: RFTConfig, run_dir: Path) -> EvalConfig:
    """The teacher's eval run: every item, M tool-mode episodes, OPD's agent and sandbox."""
    engine = cfg.teacher.engine or EngineConfig(
        name="hf", model=str(cfg.teacher.path), batch_size=cfg.rollout.batch_size
    )
    data = {cfg.data.benchmark: cfg.data.path} if cfg.data.path else {}
    return EvalConfig(
        engine=engine,
        agent=cfg.rollout.agent,
        sandbox=cfg.rollout.sandbox,
        benchmarks=[cfg.data.benchmark],
        data=data,
        limit=cfg.data.limit,
        modes=["tool"],
        samples=cfg.rollout.group_size,
        concurrency=cfg.rollout.batch_size,
        seed=cfg.data.seed,
        out=str(run_dir / TEACHER_DIR),
        bootstrap=0,
        report=False,
    )


def sft_config(cfg: RFTConfig, run_dir: Path) -> SFTConfig:
    """The SFT run on the verified set; the teacher run's image store holds its images."""
    return SFTConfig(
        model=cfg.model,
        data=DataConfig(
            train=[str(run_dir / VERIFIED_FILE)],
            images=str(run_dir / TEACHER_DIR / "images"),
            max_length=cfg.filter.max_length,
        ),
        train=cfg.train.model_copy(update={"output_dir": str(run_dir / SFT_DIR)}),
    )


def sample_stage(cfg: RFTConfig, run_dir: Path) -> StageSummary:
    """Run (or resume) the teacher's eval run; count its episodes and its accuracy."""
    eval_cfg = teacher_eval_config(cfg, run_dir)
    overall = run_eval(eval_cfg, progress=cfg.train.progress_bar)["overall"]
    episodes = overall["n_samples"]
    tool = overall["modes"].get("tool", {})
    stage = StageSummary(stage="sample", total=episodes, kept=episodes)
    stage.extra = {
        "items": overall["n_items"],
        "attempts_per_item": cfg.rollout.group_size,
        "accuracy": tool.get("accuracy"),
        "tool_rate": tool.get("tool_rate"),
    }
    return stage


def verify_stage(cfg: RFTConfig, run_dir: Path) -> StageSummary:
    """Keep the verified teacher episodes; write them, sorted by episode key."""
    stage = StageSummary(stage="verify")
    kept = []
    for done in run_trajectories(run_dir / TEACHER_DIR):
        stage.total += 1
        reason = expert_drop_reason(done, require_tool=cfg.filter.require_tool)
        if reason is None:
            kept.append(tag(done, "teacher"))
        else:
            stage.drop(reason)
    kept.sort(key=lambda done: done.record["key"])
    stage.kept = write_jsonl_atomic(run_dir / VERIFIED_FILE, (d.trajectory.to_json() for d in kept))
    items = {(d.record["benchmark"], d.record["sample_id"]) for d in kept}
    stage.extra = {"items_with_a_verified_trajectory": len(items)}
    return stage


def sft_stage(
    cfg: RFTConfig, run_dir: Path, verified: dict[str, Any], resume: bool
) -> StageSummary:
    """`run_sft` on the verified set (`resume`: from its newest checkpoint, after a kill)."""
    if verified["kept"] == 0:
        why = ", ".join(f"{k} {v}" for k, v in sorted(verified["dropped"].items()))
        raise UserError(
            f"RFT has nothing to train on: 0 of {verified['total']} teacher episodes verified "
            f"({why}). Use a stronger teacher, more attempts (--set rollout.group_size=16) or "
            f"more items (--set data.limit=...) in a new train.output_dir"
        )
    sft_cfg = sft_config(cfg, run_dir)
    sft_dir = Path(sft_cfg.train.output_dir)
    state = run_sft(sft_cfg, resume=resume)
    counts = json.loads((sft_dir / DATA_FILE).read_text())
    stage = StageSummary(stage="sft", total=verified["kept"], kept=counts["trajectories"])
    if counts["dropped_too_long"]:
        stage.dropped["too_long"] = counts["dropped_too_long"]
    stage.dropped.update(counts.get("dropped_inconsistent", {}))
    stage.extra = {"steps": state.step, "checkpoint": str(sft_dir / f"checkpoint-{state.step}")}
    return stage


def require_checkpoint(key: str, path: str) -> None:
    """Refuse a student or teacher that cannot be loaded before any sampling, not hours later
    at the SFT stage (`check_model`'s own message names the eval run's keys, not ours)."""
    try:
        check_model(EngineConfig(name="hf", model=path))
    except UserError:
        raise UserError(
            f"{key}={path}: no such checkpoint folder, and not a cached hub model; build a tiny "
            f"one with `beacon tiny make {path}`, or give a checkpoint folder"
        ) from None


def run_rft(cfg: RFTConfig, resume: bool = False) -> dict[str, Any]:
    """Run every unfinished stage into `train.output_dir`; returns `summary.json`'s content."""
    import torch
    from accelerate import PartialState

    processes = PartialState(cpu=not torch.cuda.is_available())
    run_dir = Path(cfg.train.output_dir)
    sft_resume = has_run(run_dir / SFT_DIR)  # before any process writes
    require_checkpoint("model.path", cfg.model.path)
    if cfg.teacher.path is not None:
        require_checkpoint("teacher.path", cfg.teacher.path)
    preflight(teacher_eval_config(cfg, run_dir))  # a wrong data path: nothing is written
    check_run_folder(
        run_dir,
        cfg,
        RFT_OPERATIONAL_KEYS,
        folder_setting="train.output_dir",
        resume=resume,
        write=False,
    )
    processes.wait_for_everyone()
    stages = [
        _stage("sample the teacher", "sample", run_dir, lambda: sample_stage(cfg, run_dir)),
        _stage("keep verified trajectories", "verify", run_dir, lambda: verify_stage(cfg, run_dir)),
        _stage(
            "SFT the student",
            "sft",
            run_dir,
            lambda: sft_stage(cfg, run_dir, read_summary(run_dir)["verify"], sft_resume),
        ),
    ]
    recorded: dict[str, Any] = {}

    def record(_stage: Stage, counts: StageSummary, seconds: float) -> None:
        """Counts and seconds into summary.json (main process), the stage is then done."""
        counts.extra["seconds"] = round(seconds, 1)
        recorded[counts.stage] = asdict(counts)
        logger.info("%s", counts.line())
        if processes.is_main_process:
            write_summary(run_dir, {**read_summary(run_dir), **recorded})

    if processes.is_main_process:
        write_run_config(run_dir, cfg, RFT_OPERATIONAL_KEYS)
        run_stages(stages[:2], on_done=record)
    processes.wait_for_everyone()
    run_stages(stages, on_done=record)
    return {**read_summary(run_dir), **recorded}


def _stage(title: str, name: str, run_dir: Path, run: Callable[[], StageSummary]) -> Stage:
    """A stage titled `title` in the progress lines, done once summary.json lists `name`."""
    return Stage(title, run, lambda: name in read_summary(run_dir))
