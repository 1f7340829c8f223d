"""GRPO with NAAR and HGCE (beacon.md §4): wiring only.

config -> policy (trainer) + rollout engine (in-process `hf`, or the `beacon serve` processes
of `rollout.servers`: `train.core.setup`) + sandbox + agent loop -> `loop.run` with
`grpo_step`:
rollouts (`beacon.rollout.Rollouts`: the benchmark's prompt and scorer, failed episodes and
trajectories that are not what the engine sampled dropped and counted), HGCE rescue of
all-wrong groups, `rl.score_groups` (reward by name, group filter, over-turn masking,
advantages, step stats), old log-probs and the clipped loss (`policy`), the `health/` metrics;
the loop then steps the optimizer, pushes the weights to the engine, checks the health alarms,
logs and checkpoints.

Ablations of the paper's table are settings: GRPO only = `rl.reward=binary`; +NAAR =
`rl.reward=naar`; +HGCE = `rl.reward=binary, rl.hgce.enabled=true`; both = `naar` + HGCE.

Exact resume: the prompts of step s are the seeded stream position `samples_seen`
(`loop.step_indices`), every episode is seeded from (train.seed, step, item, mode, k), and the
engine gets the restored weights before the first rollout; so a resumed run repeats the
uninterrupted run's rollouts, rewards and losses.

With `model.lora` the trainer holds adapters and the engine (in-process or served) gets the
merged weights after each step (`rollout_state_dict`), under the base checkpoint's names.

Under `accelerate launch` each process rolls out `prompts_per_step / processes` prompts on its
own engine; outcomes are gathered so that all score the same groups (`gather_outcomes`).

What is not covered (see docs/train.md): vLLM servers, a reference model for the KL term,
expert-generated hints.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from beacon.agent.loop import AgentLoop
from beacon.benchmarks import get_benchmark
from beacon.engines.registry import TINY_MODEL
from beacon.engines.tiny import cached_tiny_model
from beacon.images import ImageStore
from beacon.jsonl import JsonlWriter
from beacon.rollout import Group, Rollouts, RolloutStats
from beacon.sandbox import Sandbox
from beacon.train.core import train_loop as loop
from beacon.train.core.checkpoint import TrainState
from beacon.train.core.collate import Collator, PixelCache, rollout_check
from beacon.train.core.health import group_health
from beacon.train.core.outcomes import (
    GroupOutcomes,
    group_outcomes,
    item_decision_box,
    item_label,
)
from beacon.train.core.setup import WeightSync, build_policy, open_run, rollout_engine
from beacon.train.grpo.config import GRPOConfig
from beacon.train.grpo.group_scoring import score_groups
from beacon.train.grpo.hints import HintSource, check_hint, needs_hint
from beacon.train.grpo.policy import (
    StepTotals,
    hinted_old_logprobs,
    policy_rows,
    policy_update,
    reduce_update,
)
from beacon.types import Sample

if TYPE_CHECKING:
    from beacon.engines.base import ChatTokenizer, Engine
    from beacon.engines.hf import LogitsProcessorFactory
    from beacon.train.core.collate import Collator

logger = logging.getLogger(__name__)

HGCE_LOG = "hgce.jsonl"
"""The run's hinted groups, one line each (`log_hinted`); cut back to the checkpoint on resume."""


@dataclass
class GRPOParts:
    """What a step needs: the policy, the rollout side, and the RL set."""

    policy: loop.LoopParts
    engine: Engine
    weight_sync: WeightSync
    rollouts: Rollouts
    hints: HintSource
    samples: list[Sample]
    tokenizer: ChatTokenizer
    collate: Collator
    run_dir: Path


@dataclass
class Rescue:
    """HGCE of one step: the hinted groups, and the all-wrong groups left without a hint: no
    hint at all (`missing`), or one refused by the data pipeline or by `check_hint` here."""

    groups: list[Group]
    missing: int = 0
    refused: int = 0


def sync_weights(parts: GRPOParts) -> None:
    """Copy the trainer's weights into the rollout engine(s) (`setup.WeightSync`)."""
    parts.weight_sync(parts.policy.accelerator, parts.policy.model)


def outcomes(group: Group) -> GroupOutcomes:
    """The group's record for `beacon.train.grpo` (the item's difficulty label and decision box
    when it has them)."""
    meta = group.sample.metadata
    return group_outcomes(
        group.trajectories, group.correct, item_label(meta), item_decision_box(meta)
    )


def gather_outcomes(acc: Any, local: list[GroupOutcomes]) -> tuple[list[GroupOutcomes], int]:
    """Every process's group outcomes in rank order, and where this process's responses start."""
    per_rank = loop.gather_per_rank(acc, local)
    offset = sum(g.size for rank in per_rank[: acc.process_index] for g in rank)
    return [g for rank in per_rank for g in rank], offset


def rescue(
    parts: GRPOParts, cfg: GRPOConfig, groups: list[Group], step: int
) -> tuple[Rescue, RolloutStats]:
    """Sample a hinted group for every all-wrong group that has a usable hint (HGCE 1-3)."""
    out, stats = Rescue(groups=[]), RolloutStats()
    samples, hints = [], []
    for group in groups:
        if not needs_hint(outcomes(group)):
            continue
        sample = group.sample
        hint = parts.hints.hint(sample)
        check = check_hint(hint, sample.answer, sample.options)
        if hint is None or not hint.strip():
            if parts.hints.was_refused(sample):  # `beacon data hints` wrote accepted: false
                out.refused += 1
            else:
                out.missing += 1
        elif cfg.rl.hgce.check_leaks and not check.ok:
            logger.info("hint for %s refused: %s", sample.id, "; ".join(check.problems))
            out.refused += 1
        else:
            samples.append(sample)
            hints.append(hint)
    if samples:
        out.groups, stats = parts.rollouts.groups(samples, step, hints=hints)
        log_hinted(parts.run_dir / HGCE_LOG, out.groups, step + 1)
    return out, stats


def log_hinted(path: Path, groups: list[Group], step: int) -> None:
    """One `HGCE_LOG` line per hinted group: which item, the hint, its responses' verdicts (a
    group with a right answer is rescued), so a report can ask how the model does on rescued
    items without the hint."""
    lines = JsonlWriter(path)
    for g in groups:
        item = {"benchmark": g.sample.benchmark, "sample_id": g.sample.id, "hint": g.hint}
        lines.write({"step": step, **item, "correct": g.correct})
    lines.close()


def grpo_step(parts: GRPOParts, cfg: GRPOConfig, state: TrainState) -> loop.StepOutput:
    """Rollouts, HGCE, scoring and the policy's backward of one GRPO step.

    Each process rolls out its share of the step's prompts; the group outcomes of all
    processes are gathered, so every process scores the same groups (advantages are per group)
    and trains its own kept responses.
    """
    acc = parts.policy.accelerator
    take = cfg.rollout.prompts_per_step
    indices = loop.step_indices(state.samples_seen, take, len(parts.samples), cfg.train.seed)
    mine = loop.my_share(indices, acc)
    groups, stats = parts.rollouts.groups([parts.samples[i] for i in mine], state.step)
    hgce = Rescue(groups=[])
    if cfg.rl.hgce.enabled:
        hgce, hinted_stats = rescue(parts, cfg, groups, state.step)
        stats.add(hinted_stats)
    local = groups + hgce.groups
    gathered, offset = gather_outcomes(acc, [outcomes(g) for g in local])
    scores = score_groups(gathered, cfg.rl)
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
    old_start = time.perf_counter()
    old = hinted_old_logprobs(acc, parts.policy.model, rows, kept_trajs, parts.collate)
    old_s = time.perf_counter() - old_start
    update = policy_update(
        acc,
        parts.policy.model,
        rows,
        old,
        parts.collate,
        cfg.rl.loss,
        cfg.train.max_tokens_per_microbatch,
        cfg.train.microbatch_cost_tokens,
        totals,
    )
    update = reduce_update(acc, update)
    counts = [hgce.missing, hgce.refused, sum(stats.failed.values())]
    counts = acc.reduce(torch.tensor(counts, device=acc.device), "sum").tolist()
    extra = {
        **{f"rl/{k}": v for k, v in scores.stats.as_dict().items()},
        **group_health(gathered, scores.rewards),
        **update.health.as_metrics(),
        **update.hint.as_metrics(),
        **loop.rollout_drops(acc, stats),
        "rl/hint_missing": int(counts[0]),
        "rl/hint_refused": int(counts[1]),
        "rollout/failed": int(counts[2]),
        "rl/clip_frac": update.clip_frac,
        "rl/ratio_mean": update.ratio_mean,
        "rl/ratio_max": update.ratio_max,
        "rl/kl_old": update.kl,
        "time/rollout_s": stats.episodes_s,
        "time/sandbox_s": stats.sandbox_s,
        "time/scoring_s": stats.scoring_s,
        "time/old_logprobs_s": old_s,
        "time/update_s": update.update_s,
    }
    return loop.StepOutput(
        loss=update.loss,
        tokens=update.tokens,
        padded_tokens=update.padded_tokens,
        loss_tokens=update.loss_tokens,
        sequences=update.sequences,
        microbatches=update.microbatches,
        samples=take,
        extra=extra,
    )


def build_parts(
    cfg: GRPOConfig,
    accelerator: Any,
    run_dir: Path,
    stack: Any,
    logits_processors: LogitsProcessorFactory | None = None,
) -> GRPOParts:
    """Policy, optimizer, engine, sandbox, agent loop and the RL set; closed by `stack`;
    `logits_processors`: the in-process rollout engine's (`setup.rollout_engine`)."""
    bench = get_benchmark(cfg.rollout.benchmark)
    samples = list(
        bench.load(path=cfg.rollout.path, limit=cfg.rollout.limit, seed=cfg.rollout.data_seed)
    )
    if not samples:
        raise ValueError(f"rollout.benchmark={bench.name} gave no samples; check rollout.path")
    weight_sync = rollout_engine(
        cfg.model.path,
        cfg.rollout,
        str(accelerator.device),
        cfg.rollout.engine_batch_size,
        logits_processors=logits_processors,
    )
    engine = weight_sync.engine
    stack.callback(engine.close)
    sandbox = stack.enter_context(Sandbox(cfg.sandbox))
    store = ImageStore(run_dir / "images")
    agent = stack.enter_context(AgentLoop(engine, sandbox, cfg.agent, store=store))
    tokenizer = engine.tokenizer
    pixels = PixelCache(tokenizer.processor.image_processor, store.get)
    return GRPOParts(
        policy=build_policy(cfg.model, cfg.train, accelerator),
        engine=engine,
        weight_sync=weight_sync,
        rollouts=Rollouts(
            agent,
            bench,
            cfg.rollout.group_size,
            cfg.train.seed,
            cfg.rollout.concurrency,
            check=rollout_check(tokenizer, pixels),
        ),
        hints=HintSource(cfg.rollout.hints, cfg.rollout.synth_region_hints),
        samples=samples,
        tokenizer=tokenizer,
        collate=Collator(tokenizer.pad_token_id, tokenizer.image_token_id, pixels),
        run_dir=run_dir,
    )


def resolve_model(cfg: GRPOConfig) -> GRPOConfig:
    """`model.path: tiny` is the built-in tiny Qwen2-VL (built on first use)."""
    if cfg.model.path != TINY_MODEL:
        return cfg

    out = cfg.model_copy(deep=True)
    out.model.path = str(cached_tiny_model("qwen2_vl"))
    return out


def run_grpo(
    cfg: GRPOConfig, resume: bool = False, logits_processors: LogitsProcessorFactory | None = None
) -> TrainState:
    """Train `cfg` into `train.output_dir`; `resume` continues from its newest checkpoint;
    `logits_processors` builds the in-process rollout engine's processors from its tokenizer
    (tests steer the tiny model with `beacon.fakes.logits`; not with `rollout.servers`)."""
    cfg = resolve_model(cfg)
    prompts = {"rollout.prompts_per_step": cfg.rollout.prompts_per_step}
    accelerator, run_dir = open_run(cfg, resume, per_process=prompts)
    with contextlib.ExitStack() as stack:
        parts = build_parts(cfg, accelerator, run_dir, stack, logits_processors)
        state = loop.run(
            parts.policy,
            cfg.train,
            run_dir,
            resume,
            step=lambda state: grpo_step(parts, cfg, state),
            sync=lambda: sync_weights(parts),
            logs=(HGCE_LOG,),
            health=cfg.health,
        )
    accelerator.end_training()
    return state
