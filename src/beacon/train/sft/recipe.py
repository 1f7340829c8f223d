"""Cold-start SFT recipe (beacon.md §3): wiring only.

config -> run folder, tokenizer, trajectories (encoded, masks from segments), policy (+ LoRA,
gradient checkpointing; AdamW with warm-up and cosine decay) -> `loop.run` with `sft_step`. The
objective is Eq. 1 of `beacon.train.core.loss`: cross-entropy on generated segments only.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any

from beacon.engines.tokenizer import HFTokenizer
from beacon.images import ImageStore
from beacon.jsonl import read_jsonl, write_atomic
from beacon.rollout import check_trajectory
from beacon.train.core import train_loop as loop
from beacon.train.core.checkpoint import TrainState
from beacon.train.core.collate import ModelBatch, PixelCache, collate, plan_buckets, plan_padded
from beacon.train.core.encode import EncodedTrajectory, check_image_tokens, encode_trajectory
from beacon.train.core.setup import build_policy, open_run
from beacon.train.sft.config import SFTConfig
from beacon.types import Trajectory

logger = logging.getLogger(__name__)

DATA_FILE = "data.json"
"""{"trajectories": trained, "dropped_too_long": n, "dropped_inconsistent": {reason: n}}: what
the run trains on, written at start (trajectories that are not what their engine sampled are
left out: `beacon.rollout`)."""

PlanFn = Callable[[Sequence[int]], list[ModelBatch]]
"""Dataset indices of this process's share -> its micro-batches."""


@dataclass
class SFTData:
    """The encoded training set and what collating it needs."""

    rows: list[EncodedTrajectory]
    pad_token_id: int
    image_token_id: int | None
    pixels: PixelCache | None
    dropped_too_long: int
    dropped_inconsistent: dict[str, int] = field(default_factory=dict)  # by check reason


def read_trajectories(paths: Sequence[str]) -> list[Trajectory]:
    """Trajectories from JSONL files (a line may also wrap one as {"trajectory": {...}}), under
    `beacon.jsonl`'s bad-line policy."""
    out = []
    for path in paths:
        for n, row in enumerate(read_jsonl(Path(path)), 1):
            data = row.get("trajectory", row)
            if not isinstance(data, dict) or "segments" not in data:
                raise ValueError(f"{path}: record {n} is not a trajectory (no 'segments' key)")
            out.append(Trajectory.from_dict(data))
    return out


def build_data(cfg: SFTConfig, tokenizer: Any, processor: Any | None) -> SFTData:
    """Encode every trajectory of `data.train`; too-long ones are dropped and counted."""
    store = ImageStore(cfg.data.images) if cfg.data.images else None
    load = store.get if store is not None else None
    header = store.header if store is not None else None  # tokens need sizes, not pixels
    rows, too_long, inconsistent = [], 0, Counter()
    for traj in read_trajectories(cfg.data.train):
        found = check_trajectory(traj, tokenizer.image_token_id)
        if found is not None:
            logger.warning("trajectory %s dropped (%s): %s", traj.sample_id, *astuple(found))
            inconsistent[found.reason] += 1
            continue
        encoded = encode_trajectory(traj, tokenizer, header)
        if len(encoded) > cfg.data.max_length:
            too_long += 1
            continue
        rows.append(encoded)
    if too_long:
        logger.warning(
            "dropped %d trajectories longer than data.max_length=%d tokens",
            too_long,
            cfg.data.max_length,
        )
    if not rows:
        raise ValueError(
            f"no trajectory to train on in {cfg.data.train} ({too_long} too long, "
            f"{sum(inconsistent.values())} inconsistent); check the files or raise "
            "data.max_length"
        )
    pixels = None
    if processor is not None and load is not None:
        pixels = PixelCache(processor.image_processor, load)
    return SFTData(
        rows=rows,
        pad_token_id=tokenizer.pad_token_id,
        image_token_id=tokenizer.image_token_id,
        pixels=pixels,
        dropped_too_long=too_long,
        dropped_inconsistent=dict(inconsistent),
    )


def make_plan(data: SFTData, cfg: SFTConfig) -> PlanFn:
    """Share indices -> micro-batches, bucketed or naively padded as `train.batching` says."""

    def plan(indices: Sequence[int]) -> list[ModelBatch]:
        rows = [data.rows[i] for i in indices]
        if cfg.train.batching == "bucket":
            groups = plan_buckets(
                [len(r) for r in rows],
                cfg.train.max_tokens_per_microbatch,
                cfg.train.microbatch_cost_tokens,
            )
        else:
            groups = plan_padded(len(rows), cfg.train.micro_batch_size)
        return [_collate_checked(data, [rows[i] for i in group]) for group in groups]

    return plan


def _collate_checked(data: SFTData, rows: list[EncodedTrajectory]) -> ModelBatch:
    if data.pixels is not None and data.image_token_id is not None:
        for row in rows:
            check_image_tokens(
                row, data.image_token_id, [data.pixels.tokens(k) for k in row.images]
            )
    return collate(rows, data.pad_token_id, data.image_token_id, data.pixels)


def sft_step(
    parts: loop.LoopParts, plan: PlanFn, size: int, cfg: SFTConfig, state: TrainState
) -> loop.StepOutput:
    """The next `global_batch_size` trajectories of the seeded stream, this process's every
    `world`-th of them, cut into micro-batches; gradients of Eq. 1 accumulated."""
    batch = cfg.train.global_batch_size
    indices = loop.step_indices(state.samples_seen, batch, size, cfg.train.seed)
    result = loop.forward_backward(
        parts.accelerator, parts.model, plan(loop.my_share(indices, parts.accelerator))
    )
    return loop.StepOutput(
        loss=result.loss,
        tokens=result.tokens,
        padded_tokens=result.padded_tokens,
        loss_tokens=result.targets,
        sequences=batch,
        microbatches=result.microbatches,
        samples=batch,
    )


def build_parts(cfg: SFTConfig, accelerator: Any) -> tuple[loop.LoopParts, SFTData]:
    """The encoded data and the policy, prepared by `accelerator`."""
    tokenizer = HFTokenizer.from_pretrained(cfg.model.path)
    data = build_data(cfg, tokenizer, tokenizer.processor)
    return build_policy(cfg.model, cfg.train, accelerator), data


def run_sft(cfg: SFTConfig, resume: bool = False) -> TrainState:
    """Train `cfg` into `train.output_dir`; `resume` continues from its newest checkpoint."""
    batch = {"train.global_batch_size": cfg.train.global_batch_size}
    accelerator, run_dir = open_run(cfg, resume, per_process=batch)
    parts, data = build_parts(cfg, accelerator)
    logger.info(
        "SFT on %d trajectories (%d dropped as too long), %d processes",
        len(data.rows),
        data.dropped_too_long,
        accelerator.num_processes,
    )
    if accelerator.is_main_process:  # the count a reader will doubt, kept beside the metrics
        counts = {
            "trajectories": len(data.rows),
            "dropped_too_long": data.dropped_too_long,
            "dropped_inconsistent": data.dropped_inconsistent,
        }
        write_atomic(run_dir / DATA_FILE, json.dumps(counts) + "\n")
    plan = make_plan(data, cfg)
    state = loop.run(
        parts,
        cfg.train,
        run_dir,
        resume,
        step=lambda state: sft_step(parts, plan, len(data.rows), cfg, state),
    )
    accelerator.end_training()
    return state
