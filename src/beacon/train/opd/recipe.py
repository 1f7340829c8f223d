"""`beacon train opd`: on-policy distillation with ReVuE (docs/train.md, "OPD"). Wiring only.

config -> student (trained, accelerate) + its rollout engine (weights pushed after every step),
frozen teacher in-process (or a teacher server), item pool, sandbox + agent loop, critic
(`critic.base_url`, or with `critic.kind: scripted` the scripted synth critic served locally
over HTTP) -> the teacher check
(`probe`) -> `loop.run` with `opd_step` (Algorithm 1).

Deviations and limits:
1. Several processes each roll out their share of a step's items with their own teacher; the
   student is scored through the model `accelerator.prepare` returned (`score.SequenceScorer`)
   and back-propagated as every trainer's (`loop.accumulate`, `loop.backward`), so the launch
   may be DDP, FSDP or DeepSpeed. The teacher is not sharded: each process holds a whole copy
   (or set `teacher.base_url`).
2. Rollouts run on an in-process `hf` engine or on the `beacon serve` processes of
   `rollout.servers`, built and given the trainer's weights after each step by the code GRPO
   uses (`train.core.setup`).
3. One tokenizer/processor handle, the student's, serves the student, its rollout engine, the
   teacher's scoring and the teacher check's engine (`check_vocab` has made sure the teacher
   maps ids to the same tokens; it loads the teacher's tokenizer for that comparison only).
4. Exact resume: items, rollout seeds and random weightings depend only on (seed, step), and the
   checkpoint restores model, optimizer, scheduler and RNGs; `revue.jsonl`, `critic.jsonl` and
   `metrics.jsonl` are cut back to the checkpoint's step; `teacher_check.json` is read back.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

from beacon.agent.loop import AgentLoop
from beacon.benchmarks.base import get_benchmark
from beacon.engines.hf import HFEngine
from beacon.engines.registry import key_from_env
from beacon.engines.serve import run_app_in_thread
from beacon.engines.tokenizer import HFTokenizer
from beacon.images import ImageStore
from beacon.rollout import Rollouts
from beacon.sandbox import Sandbox
from beacon.train.core import train_loop as loop
from beacon.train.core.checkpoint import TrainState
from beacon.train.core.collate import PixelCache, rollout_check
from beacon.train.core.setup import build_policy, open_run, rollout_engine
from beacon.train.opd.config import OPD_OPERATIONAL_KEYS, OPDConfig
from beacon.train.opd.critic import CRITIC_LOG, CriticRunner, HttpCritic
from beacon.train.opd.probe import CHECK_FILE, teacher_check
from beacon.train.opd.score import SequenceScorer
from beacon.train.opd.scripted_critic import ScriptedCritic, create_app
from beacon.train.opd.step import REVUE_LOG, OPDParts, opd_step
from beacon.train.opd.teacher_server import RemoteTeacher, load_teacher_model

if TYPE_CHECKING:
    from beacon.engines.hf import LogitsProcessorFactory

logger = logging.getLogger(__name__)


def make_teacher(cfg: OPDConfig, device: Any, tokenizer: Any, pixels: Any, store: Any) -> Any:
    """In-process `SequenceScorer`, or `RemoteTeacher` when teacher.base_url is set."""
    if cfg.teacher.base_url is not None:
        key = key_from_env(cfg.teacher.api_key_env, required_by="teacher.api_key_env")
        return RemoteTeacher(cfg.teacher.base_url, store.get, api_key=key)
    return SequenceScorer(load_teacher_model(cfg.teacher.path, device), tokenizer, pixels)


def check_vocab(student_tok: Any, teacher_path: str) -> None:
    """The teacher scores the student's ids, so both must map ids to the same tokens (the
    teacher's tokenizer is loaded for this comparison only: the run uses the student's)."""
    teacher_tok = HFTokenizer.from_pretrained(teacher_path)
    if student_tok.tokenizer.get_vocab() != teacher_tok.tokenizer.get_vocab():
        raise ValueError(
            "teacher.path has another vocabulary than model.path; OPD scores the student's "
            "token ids under the teacher, so pick a teacher of the same tokenizer family"
        )


def make_critic(cfg: OPDConfig, samples: list, stack: contextlib.ExitStack) -> Any:
    """The critic `send`: an HTTP client to critic.base_url, or (critic.kind: scripted) to the
    scripted synth critic served on a local port for the run."""
    if cfg.critic.kind == "http":
        if cfg.critic.base_url is None:  # OPDConfig refuses this for a reflection teacher
            raise ValueError("critic.base_url is not set; name the critic's endpoint")
        key = key_from_env(cfg.critic.api_key_env, required_by="critic.api_key_env")
        return HttpCritic(cfg.critic.base_url, cfg.critic.model, key, cfg.critic.vllm_extensions)

    handle = run_app_in_thread(create_app(ScriptedCritic(samples)))
    stack.callback(handle.stop)
    logger.info("scripted synth critic at %s", handle.base_url)
    return HttpCritic(handle.base_url, "scripted-critic")


def build_parts(
    cfg: OPDConfig,
    accelerator: Any,
    run_dir: Any,
    stack: Any,
    logits_processors: LogitsProcessorFactory | None = None,
) -> OPDParts:
    """Student, rollout engine, teacher, critic, sandbox and agent loop; closed by `stack`;
    `logits_processors`: the in-process rollout engine's (`setup.rollout_engine`)."""
    tokenizer = HFTokenizer.from_pretrained(cfg.model.path)  # the run's one handle
    check_vocab(tokenizer, cfg.teacher.path)
    policy = build_policy(cfg.model, cfg.train, accelerator)
    device = str(accelerator.device)
    weight_sync = rollout_engine(
        cfg.model.path, cfg.rollout, device, cfg.rollout.batch_size, tokenizer, logits_processors
    )
    engine = weight_sync.engine
    stack.callback(engine.close)
    store = ImageStore(run_dir / "images")
    pixels = PixelCache(tokenizer.processor.image_processor, store.get)
    bench = get_benchmark(cfg.data.benchmark)
    samples = list(bench.load(cfg.data.path, limit=cfg.data.limit, seed=cfg.data.seed))
    if not samples:
        raise ValueError(f"data.benchmark={bench.name} gave no items; check data.path")
    critic = None
    if cfg.teacher.context == "reflection":  # base and gt teachers need no critic
        critic = CriticRunner(make_critic(cfg, samples, stack), cfg.revue, run_dir)
        stack.callback(critic.close)
    sandbox = stack.enter_context(Sandbox(cfg.rollout.sandbox))
    agent = stack.enter_context(AgentLoop(engine, sandbox, cfg.rollout.agent, store=store))
    rollout = cfg.rollout
    return OPDParts(
        cfg=cfg,
        policy=policy,
        samples=samples,
        rollouts=Rollouts(
            agent,
            bench,
            rollout.group_size,
            cfg.train.seed,
            rollout.concurrency,
            check=rollout_check(tokenizer, pixels),
        ),
        store=store,
        tokenizer=tokenizer,
        student=SequenceScorer(
            policy.model, tokenizer, pixels, inner=accelerator.unwrap_model(policy.model)
        ),
        teacher=make_teacher(cfg, accelerator.device, tokenizer, pixels, store),
        critic=critic,
        run_dir=run_dir,
        weight_sync=weight_sync,
    )


def check_teacher(parts: OPDParts) -> None:
    """The teacher check before step 1 (`teacher_check.enabled`); an in-process teacher also
    rolls out for its accuracy on an engine of its own (the run's tokenizer handle), closed
    again before training."""
    cfg, rollout = parts.cfg, parts.cfg.rollout
    if not cfg.teacher_check.enabled:
        return
    if (parts.run_dir / CHECK_FILE).exists():
        teacher_check(parts, cfg.teacher_check, None)  # the check read back
        return
    # the student's rollouts sample from its weights: servers may still hold another run's
    parts.weight_sync(parts.policy.accelerator, parts.policy.model)
    if cfg.teacher.base_url is not None:
        teacher_check(parts, cfg.teacher_check, None)
        return

    device = str(parts.policy.accelerator.device)
    engine = HFEngine(
        cfg.teacher.path, device=device, batch_size=rollout.batch_size, tokenizer=parts.tokenizer
    )
    sandbox = parts.rollouts.loop.sandbox
    with AgentLoop(engine, sandbox, rollout.agent, store=parts.store) as agent:
        rollouts = Rollouts(
            agent, parts.rollouts.bench, rollout.group_size, cfg.train.seed, rollout.concurrency
        )
        try:
            teacher_check(parts, cfg.teacher_check, rollouts)
        finally:
            engine.close()


def run_opd(
    cfg: OPDConfig, resume: bool = False, logits_processors: LogitsProcessorFactory | None = None
) -> TrainState:
    """Train `cfg` into `train.output_dir`; `resume` continues from its newest checkpoint;
    `logits_processors` builds the student's in-process rollout engine's processors from its
    tokenizer (tests steer the tiny model with `beacon.fakes.logits`; not with
    `rollout.servers`)."""
    items = {"rollout.items_per_step": cfg.rollout.items_per_step}
    accelerator, run_dir = open_run(cfg, resume, OPD_OPERATIONAL_KEYS, per_process=items)
    with contextlib.ExitStack() as stack:
        parts = build_parts(cfg, accelerator, run_dir, stack, logits_processors)
        policy = parts.policy
        check_teacher(parts)
        state = loop.run(
            parts.policy,
            cfg.train,
            run_dir,
            resume,
            step=lambda state: opd_step(parts, state),
            sync=lambda: parts.weight_sync(policy.accelerator, policy.model),
            logs=(REVUE_LOG, CRITIC_LOG),
            health=cfg.health,
        )
    accelerator.end_training()
    return state
