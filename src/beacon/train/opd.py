"""`beacon train opd`: on-policy distillation with ReVuE (docs/train.md, "OPD"). Wiring only.

config -> student (trained, accelerate) + its rollout engine (weights synced after every step),
frozen teacher in-process, item pool, sandbox + agent loop, critic (`critic.base_url`, or the
scripted synth critic served locally over HTTP) -> per step `opd_step` (Algorithm 1) ->
optimizer step -> metrics, checkpoints, exact resume.

Deviations and limits:
1. One process: the teacher, the rollout engine and the student share the device; multi-process
   OPD (teacher behind `beacon serve` / vLLM prompt log-probs) is not wired yet.
2. Rollouts run on an in-process `hf` engine that gets the trainer's weights after each step.
3. Exact resume: items, rollout seeds and random weightings depend only on (seed, step), and the
   checkpoint restores model, optimizer, scheduler and RNGs; `revue.jsonl`, `critic.jsonl` and
   `metrics.jsonl` are cut back to the checkpoint's step.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

from beacon.train import loop
from beacon.train.checkpoint import TrainState
from beacon.train.metrics import MetricsLogger, StepStats, step_metrics, truncate_after
from beacon.train.opd_config import OPDConfig
from beacon.train.opd_critic import CRITIC_LOG, CriticRunner
from beacon.train.opd_score import SequenceScorer
from beacon.train.opd_step import REVUE_LOG, OPDParts, opd_step
from beacon.train.rundir import check_run_dir, write_config
from beacon.train.sft import load_model, make_accelerator, save_model

logger = logging.getLogger(__name__)


def make_teacher(cfg: OPDConfig, device: Any, tokenizer: Any, pixels: Any, store: Any) -> Any:
    """In-process `SequenceScorer`, or `RemoteTeacher` when teacher.base_url is set."""
    from beacon.train.opd_teacher import RemoteTeacher, load_teacher_model

    if cfg.teacher.base_url is not None:
        key = os.environ.get(cfg.teacher.api_key_env) if cfg.teacher.api_key_env else None
        return RemoteTeacher(cfg.teacher.base_url, store.get, api_key=key)
    return SequenceScorer(load_teacher_model(cfg.teacher.path, device), tokenizer, pixels)


def check_vocab(student_tok: Any, teacher_tok: Any) -> None:
    """The teacher scores the student's ids, so both must map ids to the same tokens."""
    if student_tok.tokenizer.get_vocab() != teacher_tok.tokenizer.get_vocab():
        raise ValueError(
            "teacher.path has another vocabulary than model.path; OPD scores the student's "
            "token ids under the teacher, so pick a teacher of the same tokenizer family"
        )


def make_critic(cfg: OPDConfig, samples: list, stack: contextlib.ExitStack) -> Any:
    """The critic `send`: an HTTP client to critic.base_url or to a local scripted critic."""
    from beacon.revue.http import HttpCritic

    if cfg.critic.base_url is not None:
        key = os.environ.get(cfg.critic.api_key_env) if cfg.critic.api_key_env else None
        return HttpCritic(cfg.critic.base_url, cfg.critic.model, key)
    from beacon.engines.serve import run_app_in_thread
    from beacon.revue.scripted import ScriptedCritic, create_app

    handle = run_app_in_thread(create_app(ScriptedCritic(samples)))
    stack.callback(handle.stop)
    logger.info("scripted synth critic at %s", handle.base_url)
    return HttpCritic(handle.base_url, "scripted-critic")


def build_optimizer(cfg: OPDConfig, model: Any) -> tuple[Any, Any]:
    import torch
    from transformers import get_cosine_with_min_lr_schedule_with_warmup

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
    return optimizer, scheduler


def sync_weights(engine: Any, model: Any) -> None:
    """Weight sync: the rollout engine samples from the current student."""
    engine.update_weights(model.state_dict().items())


def run_opd(cfg: OPDConfig, resume: bool = False) -> TrainState:
    """Train `cfg` into `train.output_dir`; `resume` continues from its newest checkpoint."""
    from accelerate.utils import set_seed

    from beacon.agent.loop import AgentLoop
    from beacon.benchmarks.base import get_benchmark
    from beacon.engines.hf import HFEngine
    from beacon.engines.tokenizer import HFTokenizer
    from beacon.images import ImageStore
    from beacon.sandbox import Sandbox
    from beacon.train.collate import PixelCache

    accelerator = make_accelerator(cfg)
    if accelerator.num_processes > 1:
        raise ValueError("beacon train opd runs on one process; launch it without accelerate")
    run_dir = Path(cfg.train.output_dir)
    check_run_dir(run_dir, cfg, resume)
    write_config(run_dir, cfg)
    set_seed(cfg.train.seed)
    tokenizer = HFTokenizer.from_pretrained(cfg.model.path)
    check_vocab(tokenizer, HFTokenizer.from_pretrained(cfg.teacher.path))
    model = load_model(cfg)
    optimizer, scheduler = build_optimizer(cfg, model)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(scheduler)
    student = accelerator.unwrap_model(model)
    store = ImageStore(run_dir / "images")
    pixels = PixelCache(tokenizer.processor.image_processor, store.get)
    teacher = make_teacher(cfg, accelerator.device, tokenizer, pixels, store)
    bench = get_benchmark(cfg.data.benchmark)
    samples = list(bench.load(cfg.data.path, limit=cfg.data.limit, seed=cfg.data.seed))
    parts = loop.LoopParts(
        accelerator=accelerator,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        dataset_size=len(samples),
        plan=lambda _: [],
        save_model=lambda folder: save_model(accelerator, model, cfg, folder),
    )
    state = loop.restore(parts, run_dir) if resume else TrainState(step=0, samples_seen=0)
    for name in (REVUE_LOG, CRITIC_LOG):
        truncate_after(run_dir / name, state.step)
    engine = HFEngine(
        cfg.model.path, device=str(accelerator.device), batch_size=cfg.rollout.batch_size
    )
    sync_weights(engine, student)
    with contextlib.ExitStack() as stack:
        critic = None
        if cfg.teacher.context == "reflection":  # base and gt teachers need no critic
            critic = CriticRunner(make_critic(cfg, samples, stack), cfg.revue, run_dir)
            stack.callback(critic.close)
        sandbox = stack.enter_context(Sandbox(cfg.rollout.sandbox))
        agent = stack.enter_context(AgentLoop(engine, sandbox, cfg.rollout.agent, store=store))
        opd = OPDParts(
            cfg=cfg,
            samples=samples,
            agent=agent,
            store=store,
            tokenizer=tokenizer,
            student=SequenceScorer(student, tokenizer, pixels),
            teacher=teacher,
            critic=critic,
            run_dir=run_dir,
        )
        state = train(parts, opd, engine, student, state)
    engine.close()
    accelerator.end_training()
    return state


def train(
    parts: loop.LoopParts, opd: OPDParts, engine: Any, student: Any, state: TrainState
) -> TrainState:
    """Steps until train.max_steps, checkpointing every train.save_every."""
    cfg = opd.cfg
    metrics_log = MetricsLogger(
        opd.run_dir,
        enabled=True,
        total_steps=cfg.train.max_steps,
        start_step=state.step,
        tensorboard=cfg.train.tensorboard,
        progress_bar=cfg.train.progress_bar,
    )
    parts.model.train()
    items = cfg.rollout.items_per_step
    try:
        while state.step < cfg.train.max_steps:
            start = time.perf_counter()
            indices = loop.step_indices(state.samples_seen, items, len(opd.samples), cfg.train.seed)
            lr = parts.scheduler.get_last_lr()[0]
            extra = opd_step(opd, [opd.samples[i] for i in indices], state.step + 1)
            grad_norm = loop.optimizer_step(parts, cfg.train.max_grad_norm)
            sync_weights(engine, student)
            state = TrainState(step=state.step + 1, samples_seen=state.samples_seen + items)
            stats = StepStats(
                step=state.step,
                loss=extra.pop("loss"),
                lr=lr,
                grad_norm=grad_norm,
                tokens=extra.pop("tokens"),
                padded_tokens=extra.pop("tokens_computed"),
                loss_tokens=extra.pop("loss_tokens"),
                sequences=items * cfg.rollout.group_size,
                microbatches=extra["retained"],
                seconds=time.perf_counter() - start,
            )
            metrics = step_metrics(stats, extra)
            metrics_log.log(metrics)
            metrics_log.advance(metrics)
            if state.step % cfg.train.save_every == 0 or state.step == cfg.train.max_steps:
                loop.save_checkpoint(parts, opd.run_dir, state, cfg.train.keep_last)
    finally:
        metrics_log.close()
    return state
