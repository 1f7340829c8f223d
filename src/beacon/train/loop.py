"""The training loop every recipe shares, on `accelerate`.

The same code runs on one CPU, on 2 CPU processes (gloo, in tests) and on many GPUs with FSDP or
DeepSpeed, chosen by the accelerate config the run is launched with; nothing here knows which.

One step: take the next `global_batch_size` trajectories of the seeded stream, give each
process every `world`-th of them, cut the share into micro-batches, accumulate gradients
(synchronising only on the last micro-batch), clip, step optimizer and scheduler, log, and
checkpoint every `save_every` steps. The loss is normalised by the step's global number of
target tokens (`beacon.train.loss`, Eq. 1), so the split into processes and micro-batches does
not change it.

Deviations from accelerate's defaults, and why:

1. The LR scheduler is not passed through `accelerator.prepare`: the prepared scheduler steps
   once per process per step, which would make the schedule depend on the process count. It is
   registered for checkpointing instead and stepped once per optimizer step.
2. Gradient accumulation is done here (`no_sync` on all but the last micro-batch), because the
   number of micro-batches varies per step with length bucketing.

What is not covered: DeepSpeed runs its own accumulation and expects a fixed number of
micro-batches per step; use FSDP, or `train.batching=pad` with a fixed micro-batch size there.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from beacon.train import checkpoint as ckpt
from beacon.train.collate import ModelBatch
from beacon.train.config import TrainConfig
from beacon.train.loss import count_targets, summed_token_nll
from beacon.train.metrics import MetricsLogger, StepStats, step_metrics

logger = logging.getLogger(__name__)

PlanFn = Callable[[Sequence[int]], list[ModelBatch]]
"""Dataset indices of this process's share -> its micro-batches."""
SaveModelFn = Callable[[Path], None]
"""Writes the model in `save_pretrained` format into a checkpoint folder (collective call)."""


@dataclass
class LoopParts:
    """What a recipe hands the loop (all already passed through `accelerator.prepare`)."""

    accelerator: Any
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    dataset_size: int
    plan: PlanFn
    save_model: SaveModelFn


@dataclass
class StepResult:
    """Sums over all processes of one step's forward-backward."""

    nll_sum: float
    targets: int
    tokens: int
    padded_tokens: int
    microbatches: int

    @property
    def loss(self) -> float:
        return self.nll_sum / max(self.targets, 1)


@lru_cache(maxsize=4)
def _epoch_order(size: int, seed: int, epoch: int) -> tuple[int, ...]:
    generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
    return tuple(torch.randperm(size, generator=generator).tolist())


def step_indices(samples_seen: int, global_batch: int, size: int, seed: int) -> list[int]:
    """The dataset indices of the step starting at stream position `samples_seen`.

    The stream is one seeded permutation per epoch, concatenated; it depends on nothing but
    (size, seed), so a resumed run reads exactly what the uninterrupted one would have.
    """
    out = []
    for pos in range(samples_seen, samples_seen + global_batch):
        epoch, i = divmod(pos, size)
        out.append(_epoch_order(size, seed, epoch)[i])
    return out


def forward_backward(
    accelerator: Any, model: torch.nn.Module, batches: list[ModelBatch]
) -> StepResult:
    """Accumulate gradients of Eq. 1 over this process's micro-batches; sums over processes.

    DDP averages gradients over processes, so each process scales its sum by world / N.
    """
    device = accelerator.device
    local = torch.tensor(
        [
            sum(count_targets(b.labels) for b in batches),
            sum(b.num_tokens for b in batches),
            sum(b.input_ids.numel() for b in batches),
        ],
        device=device,
        dtype=torch.long,
    )
    totals = accelerator.reduce(local, reduction="sum")
    targets = int(totals[0])
    if targets == 0:
        raise ValueError(
            "this step has no target tokens (no generated segments in its trajectories); check "
            "that data.train holds trajectories with generated segments"
        )
    scale = accelerator.num_processes / targets
    nll_sum = torch.zeros((), device=device, dtype=torch.float32)
    for i, batch in enumerate(batches):
        last = i == len(batches) - 1
        sync = contextlib.nullcontext() if last else accelerator.no_sync(model)
        with sync:
            batch = batch.to(device)
            logits = model(**batch.model_inputs()).logits
            nll = summed_token_nll(logits, batch.labels)
            accelerator.backward(nll * scale)
        nll_sum += nll.detach()
    total_nll = accelerator.reduce(nll_sum, reduction="sum")
    return StepResult(
        nll_sum=float(total_nll),
        targets=targets,
        tokens=int(totals[1]),
        padded_tokens=int(totals[2]),
        microbatches=len(batches),
    )


def optimizer_step(parts: LoopParts, max_grad_norm: float | None) -> float:
    """Clip (or only measure) the gradient norm, step optimizer and scheduler; the norm."""
    params = [p for p in parts.model.parameters() if p.requires_grad]
    norm = parts.accelerator.clip_grad_norm_(params, max_grad_norm or float("inf"))
    parts.optimizer.step()
    parts.scheduler.step()
    parts.optimizer.zero_grad(set_to_none=True)
    return float(norm)


def my_share(indices: Sequence[int], accelerator: Any) -> list[int]:
    """Every `world`-th index, starting at this process's rank."""
    return list(indices[accelerator.process_index :: accelerator.num_processes])


def run(parts: LoopParts, cfg: TrainConfig, run_dir: Path, resume: bool) -> ckpt.TrainState:
    """Train until `cfg.max_steps`, from the newest complete checkpoint when `resume`."""
    accelerator = parts.accelerator
    if cfg.global_batch_size % accelerator.num_processes:
        raise ValueError(
            f"train.global_batch_size={cfg.global_batch_size} is not divisible by the "
            f"{accelerator.num_processes} processes; set it to a multiple of the process count"
        )
    state = restore(parts, run_dir) if resume else ckpt.TrainState(step=0, samples_seen=0)
    metrics_log = MetricsLogger(
        run_dir,
        enabled=accelerator.is_main_process,
        total_steps=cfg.max_steps,
        start_step=state.step,
        tensorboard=cfg.tensorboard,
        progress_bar=cfg.progress_bar,
    )
    parts.model.train()
    try:
        while state.step < cfg.max_steps:
            state = _one_step(parts, cfg, state, metrics_log)
            if state.step % cfg.save_every == 0 or state.step == cfg.max_steps:
                save_checkpoint(parts, run_dir, state, cfg.keep_last)
    finally:
        metrics_log.close()
    return state


def _one_step(
    parts: LoopParts, cfg: TrainConfig, state: ckpt.TrainState, metrics_log: MetricsLogger
) -> ckpt.TrainState:
    start = time.perf_counter()
    indices = step_indices(state.samples_seen, cfg.global_batch_size, parts.dataset_size, cfg.seed)
    batches = parts.plan(my_share(indices, parts.accelerator))
    lr = parts.scheduler.get_last_lr()[0]
    result = forward_backward(parts.accelerator, parts.model, batches)
    grad_norm = optimizer_step(parts, cfg.max_grad_norm)
    state = ckpt.TrainState(
        step=state.step + 1, samples_seen=state.samples_seen + cfg.global_batch_size
    )
    stats = StepStats(
        step=state.step,
        loss=result.loss,
        lr=lr,
        grad_norm=grad_norm,
        tokens=result.tokens,
        padded_tokens=result.padded_tokens,
        loss_tokens=result.targets,
        sequences=cfg.global_batch_size,
        microbatches=result.microbatches,
        seconds=time.perf_counter() - start,
    )
    metrics = step_metrics(stats)
    if state.step % cfg.log_every == 0 or state.step == cfg.max_steps:
        metrics_log.log(metrics)
    metrics_log.advance(metrics)
    return state


def save_checkpoint(
    parts: LoopParts, run_dir: Path, state: ckpt.TrainState, keep_last: int
) -> None:
    """Write `checkpoint-<step>` atomically (see `beacon.train.checkpoint`)."""
    accelerator = parts.accelerator
    staging = ckpt.staging_dir(run_dir, state.step)
    if accelerator.is_main_process:
        ckpt.remove_stale(run_dir)
        staging.mkdir(parents=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(staging / ckpt.STATE_DIR))
    parts.save_model(staging)
    if accelerator.is_main_process:
        state.write(staging)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        final = ckpt.commit(run_dir, state.step)
        ckpt.prune(run_dir, keep_last)
        logger.info("saved %s", final)
    accelerator.wait_for_everyone()


def restore(parts: LoopParts, run_dir: Path) -> ckpt.TrainState:
    """Load the newest complete checkpoint into model, optimizer, scheduler and RNGs."""
    accelerator = parts.accelerator
    if accelerator.is_main_process:
        ckpt.remove_stale(run_dir)
    accelerator.wait_for_everyone()
    folder = ckpt.latest_checkpoint(run_dir)
    if folder is None:
        logger.info("no complete checkpoint in %s; starting at step 0", run_dir)
        return ckpt.TrainState(step=0, samples_seen=0)
    accelerator.load_state(str(folder / ckpt.STATE_DIR))
    state = ckpt.TrainState.read(folder)
    logger.info("resumed from %s (step %d)", folder, state.step)
    return state
