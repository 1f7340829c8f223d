"""GRPO with NAAR and HGCE (beacon.md §4): wiring only.

config -> policy (trainer) + in-process `hf` engine (rollouts) + sandbox + agent loop -> per
step: rollouts (`train.rollout`), HGCE rescue of all-wrong groups, `rl.score_groups` (reward by
name, group filter, advantages, step stats), old log-probs and the clipped loss
(`train.policy`), optimizer step (`train.loop.optimizer_step`), weights copied into the engine,
metrics, checkpoints (`train.loop.save_checkpoint` / `restore`).

Ablations of the paper's table are settings: GRPO only = `rl.reward=binary`; +NAAR =
`rl.reward=naar`; +HGCE = `rl.reward=binary, rl.hgce.enabled=true`; both = `naar` + HGCE.

Exact resume: the prompts of step s are the seeded stream position `samples_seen`
(`loop.step_indices`), every episode is seeded from (train.seed, step, item, mode, k), and the
engine gets the restored weights before the first rollout; so a resumed run repeats the
uninterrupted run's rollouts, rewards and losses.

Rollouts run on an in-process `hf` engine, or on the `beacon serve` processes of
`rollout.servers` (`train.weight_sync`: requests spread over them, weights pushed after every
optimizer step).

Under `accelerate launch` each process rolls out `prompts_per_step / processes` prompts on its
own engine; outcomes are gathered so that all score the same groups (`gather_outcomes`).

What is not covered (see docs/train.md): vLLM servers, a reference
model for the KL term, LoRA, expert-generated hints.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from beacon.train import loop
from beacon.train.checkpoint import TrainState
from beacon.train.grpo_config import GRPOConfig
from beacon.train.metrics import MetricsLogger, StepStats, step_metrics
from beacon.train.policy import (
    Collate,
    StepTotals,
    hinted_old_logprobs,
    policy_rows,
    policy_update,
    reduce_update,
)
from beacon.train.rollout import Group, HintSource, Rollouts, RolloutTimes, gather_outcomes
from beacon.train.rundir import check_run_dir, write_config
from beacon.types import Sample

logger = logging.getLogger(__name__)


@dataclass
class GRPOParts:
    """What a step needs: the loop's parts, the rollout side, and the RL set."""

    loop_parts: loop.LoopParts
    engine: Any
    push: Callable[[dict[str, Any]], None]
    rollouts: Rollouts
    hints: HintSource
    samples: list[Sample]
    tokenizer: Any
    collate: Collate


@dataclass
class Rescue:
    """HGCE of one step: the hinted groups, and the all-wrong groups left without a hint."""

    groups: list[Group]
    no_hint: int = 0
    leaking: int = 0


def sync_weights(parts: GRPOParts) -> float:
    """Copy the trainer's weights into the rollout engine(s); the seconds it took."""
    start = time.perf_counter()
    accelerator = parts.loop_parts.accelerator
    parts.push(accelerator.unwrap_model(parts.loop_parts.model).state_dict())
    return time.perf_counter() - start


def rescue(
    parts: GRPOParts, cfg: GRPOConfig, groups: list[Group], step: int
) -> tuple[Rescue, RolloutTimes]:
    """Sample a hinted group for every all-wrong group that has a usable hint (HGCE 1-3)."""
    from beacon.rl import check_hint, needs_hint

    out, times = Rescue(groups=[]), RolloutTimes()
    samples, hints = [], []
    for group in groups:
        if not needs_hint(group.outcomes()):
            continue
        sample = group.sample
        hint = parts.hints.hint(sample)
        check = check_hint(hint, sample.answer, sample.options)
        if hint is None or not hint.strip():
            out.no_hint += 1
        elif cfg.rl.hgce.check_leaks and not check.ok:
            logger.info("hint for %s refused: %s", sample.id, "; ".join(check.problems))
            out.leaking += 1
        else:
            samples.append(sample)
            hints.append(hint)
    if samples:
        out.groups, times = parts.rollouts.groups(samples, step, hints=hints)
    return out, times


def grpo_step(
    parts: GRPOParts, cfg: GRPOConfig, state: TrainState
) -> tuple[TrainState, dict[str, Any]]:
    """One GRPO step: rollouts, HGCE, scoring, update, weight sync; its metrics dict.

    Each process rolls out its share of the step's prompts; the group outcomes of all
    processes are gathered, so every process scores the same groups (advantages are per group)
    and trains its own kept responses.
    """
    from beacon.rl import score_groups

    start = time.perf_counter()
    lp = parts.loop_parts
    acc = lp.accelerator
    take = cfg.rollout.prompts_per_step
    indices = loop.step_indices(state.samples_seen, take, len(parts.samples), cfg.train.seed)
    mine = loop.my_share(indices, acc)
    groups, times = parts.rollouts.groups([parts.samples[i] for i in mine], state.step)
    hgce = Rescue(groups=[])
    if cfg.rl.hgce.enabled:
        hgce, hinted_times = rescue(parts, cfg, groups, state.step)
        times.add(hinted_times)
    local = groups + hgce.groups
    outcomes, offset = gather_outcomes(acc, [g.outcomes() for g in local])
    scores = score_groups(outcomes, cfg.rl)
    trajectories = [t for g in local for t in g.trajectories]
    kept = [i for i in range(len(trajectories)) if scores.keep[offset + i]]
    kept_trajs = [trajectories[i] for i in kept]
    rows = policy_rows(
        kept_trajs, scores.advantages[[offset + i for i in kept]].tolist(), parts.tokenizer
    )
    if not rows:  # join the gradient all-reduce with a row that adds nothing
        kept_trajs = trajectories[:1]
        rows = [replace(r, weight=0) for r in policy_rows(kept_trajs, [0.0], parts.tokenizer)]
    local_tokens = torch.tensor([sum(r.encoded.num_loss_tokens * r.weight for r in rows)])
    totals = StepTotals(sum(scores.keep), int(acc.reduce(local_tokens.to(acc.device), "sum")[0]))
    lr = lp.scheduler.get_last_lr()[0]
    old_start = time.perf_counter()
    old = hinted_old_logprobs(lp.model, rows, kept_trajs, parts.collate, acc.device)
    old_s = time.perf_counter() - old_start
    update = policy_update(
        acc,
        lp.model,
        rows,
        old,
        parts.collate,
        cfg.rl.loss,
        cfg.train.max_tokens_per_microbatch,
        cfg.train.microbatch_cost_tokens,
        totals,
    )
    update = reduce_update(acc, update)
    optimizer_start = time.perf_counter()
    grad_norm = loop.optimizer_step(lp, cfg.train.max_grad_norm)
    optimizer_s = time.perf_counter() - optimizer_start
    sync_s = sync_weights(parts)
    state = TrainState(step=state.step + 1, samples_seen=state.samples_seen + take)
    seconds = time.perf_counter() - start
    timed = times.episodes_s + times.scoring_s + old_s + update.update_s + optimizer_s + sync_s
    hints = acc.reduce(torch.tensor([hgce.no_hint, hgce.leaking], device=acc.device), "sum")
    extra = {
        **{f"rl/{k}": v for k, v in scores.stats.as_dict().items()},
        "rl/hint_missing": int(hints[0]),
        "rl/hint_refused": int(hints[1]),
        "rl/clip_frac": update.clip_frac,
        "rl/ratio_mean": update.ratio_mean,
        "rl/ratio_max": update.ratio_max,
        "rl/kl_old": update.kl,
        "time/rollout_s": times.episodes_s,
        "time/sandbox_s": times.sandbox_s,
        "time/scoring_s": times.scoring_s,
        "time/old_logprobs_s": old_s,
        "time/update_s": update.update_s,
        "time/optimizer_s": optimizer_s,
        "time/weight_sync_s": sync_s,
        "time/other_s": seconds - timed,
    }
    stats = StepStats(
        step=state.step,
        loss=update.loss,
        lr=lr,
        grad_norm=grad_norm,
        tokens=update.tokens,
        padded_tokens=update.padded_tokens,
        loss_tokens=update.loss_tokens,
        sequences=update.sequences,
        microbatches=update.microbatches,
        seconds=seconds,
    )
    return state, step_metrics(stats, extra)


def build_parts(cfg: GRPOConfig, accelerator: Any, run_dir: Path, stack: Any) -> GRPOParts:
    """Policy, optimizer, engine, sandbox, agent loop and the RL set; closed by `stack`."""
    import torch
    from accelerate.utils import set_seed
    from transformers import get_cosine_with_min_lr_schedule_with_warmup

    from beacon.agent.loop import AgentLoop
    from beacon.benchmarks import get_benchmark
    from beacon.images import ImageStore
    from beacon.sandbox import Sandbox
    from beacon.train.collate import PixelCache, collate
    from beacon.train.sft import load_model, save_model
    from beacon.train.weight_sync import rollout_engine

    set_seed(cfg.train.seed)
    bench = get_benchmark(cfg.rollout.benchmark)
    samples = list(
        bench.load(path=cfg.rollout.path, limit=cfg.rollout.limit, seed=cfg.rollout.data_seed)
    )
    if not samples:
        raise ValueError(f"rollout.benchmark={bench.name} gave no samples; check rollout.path")
    engine, push = rollout_engine(cfg, str(accelerator.device))
    stack.callback(engine.close)
    sandbox = stack.enter_context(Sandbox(cfg.sandbox))
    store = ImageStore(run_dir / "images")
    agent = stack.enter_context(AgentLoop(engine, sandbox, cfg.agent, store=store))
    model = load_model(cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params, lr=cfg.train.lr, betas=cfg.train.betas, weight_decay=cfg.train.weight_decay
    )
    scheduler = get_cosine_with_min_lr_schedule_with_warmup(
        optimizer,
        num_warmup_steps=cfg.train.warmup_steps,
        num_training_steps=cfg.train.max_steps,
        min_lr_rate=cfg.train.min_lr_ratio,
    )
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(scheduler)
    tokenizer = engine.tokenizer
    pixels = PixelCache(tokenizer.processor.image_processor, store.get)
    loop_parts = loop.LoopParts(
        accelerator=accelerator,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        dataset_size=len(samples),
        plan=lambda indices: [],  # GRPO builds its batches from rollouts, not from `plan`
        save_model=lambda folder: save_model(accelerator, model, cfg, folder),
    )
    return GRPOParts(
        loop_parts=loop_parts,
        engine=engine,
        push=push,
        rollouts=Rollouts(
            agent, bench, cfg.rollout.group_size, cfg.train.seed, cfg.rollout.concurrency
        ),
        hints=HintSource(cfg.rollout.hints, cfg.rollout.synth_region_hints),
        samples=samples,
        tokenizer=tokenizer,
        collate=lambda rows: collate(
            rows, tokenizer.pad_token_id, tokenizer.image_token_id, pixels
        ),
    )


def resolve_model(cfg: GRPOConfig) -> GRPOConfig:
    """`model.path: tiny` is the built-in tiny Qwen2-VL (built on first use)."""
    from beacon.engines.registry import TINY_MODEL

    if cfg.model.path != TINY_MODEL:
        return cfg
    from beacon.engines.tiny import cached_tiny_model

    out = cfg.model_copy(deep=True)
    out.model.path = str(cached_tiny_model("qwen2_vl"))
    return out


def run_grpo(cfg: GRPOConfig, resume: bool = False) -> TrainState:
    """Train `cfg` into `train.output_dir`; `resume` continues from its newest checkpoint."""
    from beacon.train.sft import make_accelerator

    cfg = resolve_model(cfg)
    accelerator = make_accelerator(cfg)
    if cfg.rollout.prompts_per_step % accelerator.num_processes:
        raise ValueError(
            f"rollout.prompts_per_step={cfg.rollout.prompts_per_step} is not divisible by the "
            f"{accelerator.num_processes} processes; set it to a multiple of the process count"
        )
    run_dir = Path(cfg.train.output_dir)
    check_run_dir(run_dir, cfg, resume)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        write_config(run_dir, cfg)
    accelerator.wait_for_everyone()
    with contextlib.ExitStack() as stack:
        parts = build_parts(cfg, accelerator, run_dir, stack)
        lp = parts.loop_parts
        state = loop.restore(lp, run_dir) if resume else TrainState(step=0, samples_seen=0)
        sync_weights(parts)  # the engine samples with the (restored) trainer weights
        metrics_log = MetricsLogger(
            run_dir,
            enabled=accelerator.is_main_process,
            total_steps=cfg.train.max_steps,
            start_step=state.step,
            tensorboard=cfg.train.tensorboard,
            progress_bar=cfg.train.progress_bar,
        )
        stack.callback(metrics_log.close)
        lp.model.train()
        while state.step < cfg.train.max_steps:
            state, metrics = grpo_step(parts, cfg, state)
            if state.step % cfg.train.log_every == 0 or state.step == cfg.train.max_steps:
                metrics_log.log(metrics)
            metrics_log.advance(metrics)
            if state.step % cfg.train.save_every == 0 or state.step == cfg.train.max_steps:
                loop.save_checkpoint(lp, run_dir, state, cfg.train.keep_last)
    accelerator.end_training()
    return state
