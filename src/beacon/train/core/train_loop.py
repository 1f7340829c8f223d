"""The one training loop, on `accelerate`: SFT, GRPO and OPD supply a step function, `run` does
the rest the same way for all (RFT's training stage is SFT); docs/train.md, "One loop".

`run`: restore the newest complete checkpoint (model, optimizer, scheduler, RNGs, data position)
and cut the run's logs back to it, push the weights to the rollout engine, then per step the
trainer's `step` (gradients accumulated, no optimizer step), the optimizer and scheduler step
(skipped for a step without learning signal: Adam would turn float noise into full-size
updates), the weight push, metrics with the health alarms' flags (`health.HealthMonitor`) every
`log_every` steps, a checkpoint every `save_every` (and at an alarm with
`health.stop_on_alarm`, which then stops the run).
Nothing here knows whether it runs on one CPU, gloo processes or GPUs with FSDP / DeepSpeed.

Deviations from accelerate's defaults, and why:

1. The LR scheduler is not passed through `accelerator.prepare`: the prepared scheduler steps
   once per process per step, which would make the schedule depend on the process count. It is
   registered for checkpointing instead and stepped once per optimizer step.
2. Gradient accumulation is done by the step functions, because the number of micro-batches
   varies per step with length bucketing; all three do it the same way (`accumulate`,
   `backward`): every process runs the same number of micro-batches (the largest count of any
   process; a process with fewer runs placeholders of weight 0, as FSDP and ZeRO-3 gather
   parameters in every forward and backward, a collective all must join), `no_sync` on all but
   the last, and each backward scaled by the process count, as the launch averages gradients.

What is not covered: DeepSpeed runs its own accumulation and expects a fixed number of
micro-batches per step; use FSDP, or `train.batching=pad` with a fixed micro-batch size there.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from beacon.rollout import CHECK_REASONS, RolloutStats
from beacon.train.core import checkpoint as ckpt
from beacon.train.core.collate import ModelBatch
from beacon.train.core.config import HealthConfig, TrainConfig
from beacon.train.core.health import HealthMonitor, stop_error
from beacon.train.core.loss import count_targets, summed_token_nll
from beacon.train.core.metrics import (
    METRICS_FILE,
    MetricsLogger,
    StepOutput,
    dropped_metrics,
    read_metrics,
    step_metrics,
    truncate_after,
)

logger = logging.getLogger(__name__)

SaveModelFn = Callable[[Path], None]
"""Writes the model in `save_pretrained` format into a checkpoint folder (collective call)."""


@dataclass
class LoopParts:
    """The trained model and its optimisation (all already passed through `accelerator.prepare`)."""

    accelerator: Any
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    save_model: SaveModelFn


StepFn = Callable[[ckpt.TrainState], StepOutput]
"""One step of a trainer: accumulate the step's gradient (no optimizer step) and report it."""
SyncFn = Callable[[], None]
"""Pushes the trainer's current weights to the rollout engine(s)."""


@dataclass
class StepResult:
    """Sums over all processes of one SFT forward-backward (`forward_backward`)."""

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


def my_share(indices: Sequence[int], accelerator: Any) -> list[int]:
    """Every `world`-th index, starting at this process's rank."""
    return list(indices[accelerator.process_index :: accelerator.num_processes])


def gather_per_rank(accelerator: Any, local: list[Any]) -> list[list[Any]]:
    """Every process's `local` list (picklable items), in rank order."""
    if accelerator.num_processes == 1:
        return [local]
    from accelerate.utils import gather_object

    return gather_object([local])


def rollout_drops(accelerator: Any, stats: RolloutStats) -> dict[str, float]:
    """The step's rollout-check drops over all processes (`metrics.dropped_metrics`)."""
    local = [stats.episodes, *(stats.inconsistent.get(r, 0) for r in CHECK_REASONS)]
    total = accelerator.reduce(torch.tensor(local, device=accelerator.device), "sum").tolist()
    return dropped_metrics(dict(zip(CHECK_REASONS, total[1:], strict=True)), total[0])


def accumulate(accelerator: Any, model: torch.nn.Module, count: int) -> Iterator[int]:
    """The micro-batch indices 0 .. N - 1 of one step's gradient accumulation, each yielded
    inside its gradient-sync context (`no_sync` on all but the last), N the largest `count`
    of all processes; an index >= `count` is a placeholder this process runs with weight 0
    (FSDP and ZeRO-3 gather parameters in every forward and backward: all processes must run
    as many). The caller's forward and backward of index i run in the loop body."""
    total = most_of_all(accelerator, count)
    for i in range(total):
        with contextlib.nullcontext() if i == total - 1 else accelerator.no_sync(model):
            yield i


def most_of_all(accelerator: Any, count: int) -> int:
    """The largest `count` of all processes: how many forward passes of the trained model each
    process runs where their own counts differ (see `accumulate`)."""
    if accelerator.num_processes == 1:
        return count
    local = torch.tensor([count], device=accelerator.device)
    return int(accelerator.reduce(local, reduction="max")[0])


def backward(accelerator: Any, loss: torch.Tensor) -> None:
    """Back-propagate this process's share of the step's loss (shares of all processes sum to
    the step's loss): DDP, FSDP and ZeRO average gradients over the processes, so the share is
    scaled by the process count to make that average the gradient of the sum."""
    accelerator.backward(loss * accelerator.num_processes)


def forward_backward(
    accelerator: Any, model: torch.nn.Module, batches: list[ModelBatch]
) -> StepResult:
    """Accumulate gradients of Eq. 1 over this process's micro-batches (`accumulate`,
    `backward`: this process's NLL sum over the step's target count); sums over processes."""
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
    nll_sum = torch.zeros((), device=device, dtype=torch.float32)
    for i in accumulate(accelerator, model, len(batches)):
        weight = 1.0 if i < len(batches) else 0.0  # a placeholder repeats batch 0, weight 0
        batch = batches[i if weight else 0].to(device)
        logits = model(**batch.model_inputs()).logits
        nll = summed_token_nll(logits, batch.labels) * weight
        backward(accelerator, nll / targets)
        nll_sum += nll.detach()
    total_nll = accelerator.reduce(nll_sum, reduction="sum")
    return StepResult(
        nll_sum=float(total_nll),
        targets=targets,
        tokens=int(totals[1]),
        padded_tokens=int(totals[2]),
        microbatches=len(batches),
    )


def optimizer_step(parts: LoopParts, max_grad_norm: float | None, update: bool = True) -> float:
    """Clip (or only measure) the gradient norm, step optimizer (unless `update` is False) and
    scheduler, clear the gradient; the norm."""
    params = [p for p in parts.model.parameters() if p.requires_grad]
    norm = parts.accelerator.clip_grad_norm_(params, max_grad_norm or float("inf"))
    with warnings.catch_warnings():
        if update:
            parts.optimizer.step()
        else:  # torch warns of a schedule stepped before any optimizer step: here on purpose
            warnings.filterwarnings("ignore", re.escape("Detected call of `lr_scheduler.step()`"))
        parts.scheduler.step()
    parts.optimizer.zero_grad(set_to_none=True)
    return float(norm)


def run(
    parts: LoopParts,
    cfg: TrainConfig,
    run_dir: Path,
    resume: bool,
    step: StepFn,
    sync: SyncFn | None = None,
    logs: Sequence[str] = (),
    health: HealthConfig | None = None,
) -> ckpt.TrainState:
    """Train until `cfg.max_steps`, from the newest complete checkpoint when `resume`.

    `sync` pushes the weights to the rollout engine(s), before the first step and after every
    optimizer step; `logs` are the trainer's own JSONL files in `run_dir` (lines with a `step`),
    cut back to the restored step so a resumed run rewrites them once; `health` sets the alarms
    (default: `HealthConfig()`).
    """
    accelerator = parts.accelerator
    state = restore(parts, run_dir) if resume else ckpt.TrainState(step=0, samples_seen=0)
    if accelerator.is_main_process:
        for name in logs:
            truncate_after(run_dir / name, state.step)
    if sync is not None:
        sync()
    metrics_log = MetricsLogger(
        run_dir,
        accelerator,
        total_steps=cfg.max_steps,
        start_step=state.step,
        progress_bar=cfg.progress_bar,
    )
    monitor = _monitor(health or HealthConfig(), run_dir, state.step, accelerator)
    parts.model.train()
    try:
        while state.step < cfg.max_steps:
            state, metrics = run_step(parts, cfg, state, step, sync)
            alarms = monitor.check(metrics)
            if state.step % cfg.log_every == 0 or state.step == cfg.max_steps or alarms:
                metrics_log.log(metrics)
            metrics_log.advance(metrics)
            stop = monitor.cfg.stop_on_alarm and bool(alarms)
            if state.step % cfg.save_every == 0 or state.step == cfg.max_steps or stop:
                save_checkpoint(parts, run_dir, state, cfg.keep_last)
            if stop:
                raise stop_error(alarms, f"{run_dir}/checkpoint-{state.step}")
    finally:
        metrics_log.close()
    return state


def _monitor(cfg: HealthConfig, run_dir: Path, step: int, accelerator: Any) -> HealthMonitor:
    """The run's health monitor, with the logged steps up to `step` replayed (a resume)."""
    monitor = HealthMonitor(cfg, log=accelerator.is_main_process)
    path = run_dir / METRICS_FILE
    if step > 0 and path.exists():
        monitor.replay(row for row in read_metrics(path) if row.get("step", 0) <= step)
    return monitor


def run_step(
    parts: LoopParts,
    cfg: TrainConfig,
    state: ckpt.TrainState,
    step: StepFn,
    sync: SyncFn | None = None,
) -> tuple[ckpt.TrainState, dict[str, Any]]:
    """One whole step: the trainer's `step`, the optimizer step, the weight push; the new
    state and the step's metrics dict."""
    start = time.perf_counter()
    lr = parts.scheduler.get_last_lr()[0]
    out = step(state)
    optimizer_start = time.perf_counter()
    grad_norm = optimizer_step(parts, cfg.max_grad_norm, update=out.update)
    sync_start = time.perf_counter()
    if sync is not None:
        sync()
    end = time.perf_counter()
    if not out.update:
        logger.info("step %d: no learning signal, optimizer step skipped", state.step + 1)
    state = ckpt.TrainState(step=state.step + 1, samples_seen=state.samples_seen + out.samples)
    out.extra = {
        **out.extra,
        "time/optimizer_s": sync_start - optimizer_start,
        "time/weight_sync_s": end - sync_start,
    }
    return state, step_metrics(state.step, out, lr, grad_norm, end - start)


def save_checkpoint(
    parts: LoopParts, run_dir: Path, state: ckpt.TrainState, keep_last: int
) -> None:
    """Write `checkpoint-<step>` atomically (see `beacon.train.core.checkpoint`)."""
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
