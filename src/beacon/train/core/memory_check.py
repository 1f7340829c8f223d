"""The memory plan of a recipe's config under a launch, and the stop before step 1: a plan over
its device ends the run (a `UserError`) naming the settings that would fit (`REMEDIES`: LoRA,
gradient checkpointing, an FSDP or ZeRO-3 launch, a teacher server, fewer rows per micro-batch;
one alone where it suffices, else the shortest run of them together). The rows and their
formulas are `beacon.train.core.memory_plan`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from beacon.errors import UserError
from beacon.train.core.config import LoraConfig, ModelConfig, TrainConfig
from beacon.train.core.memory_plan import (
    GiB,
    Launch,
    MemoryPlan,
    Sharding,
    Workload,
    model_shape,
    plan_memory,
    render,
)

PROMPT_TOKENS = 1024
"""An episode's prompt tokens (text and image) besides its generated ones, when the agent sets
no `max_context_tokens`."""
DEVICE_MEMORY_ENV = "BEACON_DEVICE_MEMORY_GB"
"""Device memory (GB) the plan checks against, instead of the device's own (`--device-memory-gb`
sets it)."""


@dataclass(frozen=True)
class Remedy:
    """A setting that changes the plan, and how to set it."""

    name: str
    apply: Callable[[Any, Launch], tuple[Any, Launch] | None]


def remedies_that_fit(
    cfg: Any, launch: Launch, planner: Callable[[Any, Launch], MemoryPlan]
) -> list[str]:
    """Each remedy (`REMEDIES`) that makes `cfg` fit under `launch`, with its total; when none
    does alone, the shortest run of them, applied in order, that does."""
    out = []
    for remedy in REMEDIES:
        changed = remedy.apply(cfg, launch)
        if changed is not None and planner(*changed).fits:
            out.append(f"{remedy.name} ({planner(*changed).total / GiB:.1f} GiB)")
    if out:
        return out
    together, names = (cfg, launch), []
    for remedy in REMEDIES:
        changed = remedy.apply(*together)
        if changed is None:
            continue
        together, names = changed, [*names, remedy.name]
        plan = planner(*together)
        if plan.fits:
            return [f"{' + '.join(names)}, together ({plan.total / GiB:.1f} GiB)"]
    return ["none of these, even together; more devices"]


def _with(cfg: Any, key: str, value: Any) -> Any:
    """`cfg` with the dotted `key` set (a deep copy)."""
    out = cfg.model_copy(deep=True)
    *parents, last = key.split(".")
    node = out
    for part in parents:
        node = getattr(node, part)
    setattr(node, last, value)
    return out


def _lora(cfg: Any, launch: Launch) -> tuple[Any, Launch] | None:
    return None if cfg.model.lora is not None else (_with(cfg, "model.lora", LoraConfig()), launch)


def _checkpointing(cfg: Any, launch: Launch) -> tuple[Any, Launch] | None:
    on = cfg.model.gradient_checkpointing
    return None if on else (_with(cfg, "model.gradient_checkpointing", True), launch)


def _sharded(sharding: Sharding) -> Callable[[Any, Launch], tuple[Any, Launch] | None]:
    def apply(cfg: Any, launch: Launch) -> tuple[Any, Launch] | None:
        if launch.processes < 2 or launch.sharding == sharding:
            return None
        return cfg, replace(launch, sharding=sharding)

    return apply


def _teacher_server(cfg: Any, launch: Launch) -> tuple[Any, Launch] | None:
    if not hasattr(cfg, "revue") or cfg.teacher.base_url is not None:  # OPD's own teacher only
        return None
    return _with(cfg, "teacher.base_url", "http://teacher:8000/v1"), launch


def _fewer_rows(cfg: Any, launch: Launch) -> tuple[Any, Launch] | None:
    if hasattr(cfg, "revue"):  # OPD trains one episode at a time: the agent's limits size it
        return None
    train = cfg.train
    if train.batching == "pad":
        rows = train.micro_batch_size
        return None if rows == 1 else (_with(cfg, "train.micro_batch_size", rows // 2), launch)
    tokens = train.max_tokens_per_microbatch
    if tokens <= 512:
        return None
    return _with(cfg, "train.max_tokens_per_microbatch", tokens // 2), launch


REMEDIES = (
    Remedy("model.lora (r=16)", _lora),
    Remedy("model.gradient_checkpointing=true", _checkpointing),
    Remedy("an FSDP launch (examples/accelerate/fsdp.yaml)", _sharded("fsdp")),
    Remedy("a ZeRO-3 launch (examples/accelerate/zero3.yaml)", _sharded("zero3")),
    Remedy("teacher.base_url (a teacher server, beacon revue serve-teacher)", _teacher_server),
    Remedy(
        "half the rows per micro-batch (train.max_tokens_per_microbatch or, with pad "
        "batching, train.micro_batch_size)",
        _fewer_rows,
    ),
)


def recipe_workload(cfg: Any) -> Workload:
    """The micro-batch, teacher and in-process engine of a recipe's config. SFT and RFT train on
    `train.max_tokens_per_microbatch` tokens in rows of up to `data.max_length` (pad batching:
    `micro_batch_size` rows of it); GRPO too, in rows of an episode, with its engine beside
    (none with `rollout.servers`); OPD on one episode at a time, its logits in `revue.chunk_size`
    blocks, with its teacher (none with `teacher.base_url`) and its engine."""
    train: TrainConfig = cfg.train
    tokens = train.max_tokens_per_microbatch
    agent = getattr(cfg, "agent", None) or getattr(getattr(cfg, "rollout", None), "agent", None)
    episode = 0
    if agent is not None:
        episode = agent.max_context_tokens or agent.max_total_new_tokens + PROMPT_TOKENS
    revue = getattr(cfg, "revue", None)
    if revue is not None:  # OPD
        teacher = cfg.teacher.path if cfg.teacher.base_url is None else None
        return Workload(
            tokens=episode,
            row=episode,
            logit_tokens=min(episode, revue.chunk_size),
            teacher=None if teacher is None else model_shape(teacher, key="teacher.path"),
            engine_rows=cfg.rollout.batch_size,
            engine_tokens=episode,
        )
    rollout = getattr(cfg, "rollout", None)
    if hasattr(rollout, "servers"):  # GRPO
        rows = 0 if rollout.servers else rollout.engine_batch_size
        row = min(episode, tokens)
        return Workload(tokens, row, tokens, engine_rows=rows, engine_tokens=episode)
    row = getattr(getattr(cfg, "data", None), "max_length", tokens)
    if train.batching == "pad":
        tokens = train.micro_batch_size * row
    return Workload(tokens, min(row, tokens), tokens)


def plan_for(cfg: Any, launch: Launch) -> MemoryPlan:
    """The memory plan of a recipe config under `launch`."""
    shape = model_shape(cfg.model.path, cfg.model)
    return plan_memory(shape, cfg.model, launch, recipe_workload(cfg))


def current_launch(
    model: ModelConfig, processes: int | None = None, sharding: Sharding | None = None
) -> Launch:
    """The launch this process is in, read from accelerate's environment (WORLD_SIZE,
    ACCELERATE_USE_FSDP, ACCELERATE_USE_DEEPSPEED and its ZeRO stage) where not given: what a
    dry run plans for without starting one."""
    import torch

    cuda = torch.cuda.is_available()
    n = processes or int(os.environ.get("WORLD_SIZE", "1"))
    if sharding is None:
        sharding = "ddp" if n > 1 else "none"
        if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
            sharding = "fsdp"
        elif os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
            stage = os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")
            sharding = {"1": "zero1", "3": "zero3"}.get(stage, "zero2")
    precision = model.mixed_precision
    bf16 = precision == "bf16" or (precision == "auto" and cuda and torch.cuda.is_bf16_supported())
    return Launch(n, sharding, bf16, cuda, device_bytes(cuda))


def accelerator_launch(accelerator: Any) -> Launch:
    """The launch `accelerator` runs (FSDP asked for on CPU processes is the DDP accelerate
    falls back to)."""
    kind = str(getattr(accelerator.distributed_type, "value", accelerator.distributed_type))
    n = accelerator.num_processes
    sharding: Sharding = "ddp" if n > 1 else "none"
    if kind == "FSDP":
        sharding = "fsdp"
    elif kind == "DEEPSPEED":
        stage = accelerator.state.deepspeed_plugin.zero_stage
        sharding = {1: "zero1", 3: "zero3"}.get(stage, "zero2")
    cuda = accelerator.device.type == "cuda"
    return Launch(n, sharding, accelerator.mixed_precision == "bf16", cuda, device_bytes(cuda))


def device_bytes(cuda: bool) -> int:
    """Each device's memory: $BEACON_DEVICE_MEMORY_GB when set, else the GPU's, else this
    machine's RAM shared by the node's processes."""
    import torch

    gb = float(os.environ.get(DEVICE_MEMORY_ENV) or 0)
    if gb > 0:
        return int(gb * 1e9)
    if cuda:
        return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // local


def check_plan(cfg: Any, launch: Launch, title: str, echo: Callable[[str], None]) -> MemoryPlan:
    """Show the plan through `echo` (the trainer's log, or the CLI's output for --dry-run); a
    plan over the device stops here (UserError) naming the settings that would fit."""
    plan = plan_for(cfg, launch)
    echo(render(plan, title))
    if plan.fits:
        return plan
    fixes = remedies_that_fit(cfg, launch, plan_for)
    raise UserError(
        f"the memory plan needs {plan.total / GiB:.1f} GiB per device and the device has "
        f"{launch.device_bytes / GiB:.1f} GiB (table above). Settings that would fit: "
        f"{'; '.join(fixes)}. Set --device-memory-gb (or ${DEVICE_MEMORY_ENV}) if the device "
        "has more than detected"
    )
