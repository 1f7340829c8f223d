"""The memory plan, and the stop before step 1.

The plan: per-device bytes a training run will need, computed from the checkpoint's config
before anything large is loaded. Every trainer prints it (`open_run`), and `beacon train
sft|grpo|opd|rft --dry-run` prints only the plan. `check_plan` plans a recipe's config under its
launch; a plan over its device ends the run (a `UserError`) naming the settings that would fit
(`REMEDIES`: LoRA, gradient checkpointing, an FSDP or ZeRO-3 launch, a teacher server, fewer rows
per micro-batch; one alone where it suffices, else the shortest run of them together).

Parameter counts come from the checkpoint's `config.json`, the model built on the meta device
(no weights read). Per device, with P all parameters, T the trainable ones (all but a frozen
vision tower; LoRA: the adapters' r x (in + out) per matched linear), N processes:

| row | bytes | sharded over N by |
|---|---|---|
| parameters | 4 P (Beacon loads float32; bf16 runs autocast), DeepSpeed bf16: 2 P | FSDP, ZeRO-3 |
| master weights | DeepSpeed bf16 only: 4 T | ZeRO-1/2/3 |
| gradients | 4 T (DeepSpeed bf16: 2 T); DDP, N > 1: twice (reducer buckets) | FSDP, ZeRO-2/3 |
| optimizer | AdamW's two fp32 moments: 8 T | FSDP, ZeRO-1/2/3 |
| activations | `activation_bytes`: layers x tokens of the largest micro-batch, see below | - |
| weight copies | bf16 autocast without FSDP / DeepSpeed: 2 P (see below) | - |
| logits | `LOGIT_COPIES` x tokens x vocabulary x 4 | - |
| teacher | OPD's in-process teacher: 4 P_teacher (float32); a teacher server: 0 | - |
| rollout engine | in-process hf engine: its weights (bf16 on CUDA, fp32 on CPU) + KV cache | - |
| reserve | CUDA: `CUDA_RESERVE` (context, kernels' workspace); CPU: 0 | - |

Activations, per token of one decoder layer (HF's Qwen2 / Qwen2.5-VL layer with SDPA, counted
from the tensors autograd saves for backward; `benchmarks/memory_plan_check.py` counts them
with `saved_tensors_hooks`): each RMSNorm keeps its float32 input, its 1/rms and the normalised
value (2 h + 1, float32: the residual stream is float32 because the weights are); the attention
keeps the rotated query, the key and value repeated to every head (the GQA path transformers
takes with a padding mask), SDPA's output (4 h) and its log-sum-exp (n_heads); the MLP keeps
gate, up, SiLU(gate) and their product (4 I); each linear keeps its input (float32: the norm's
output, h, per norm; bf16 autocast: one bf16 cast per linear, 3 h for q/k/v and 2 h for
gate/up); SDPA keeps its own copy of the padding mask's rows (len per token, len the longest
row, in the compute dtype). So float32: 4 (10 h + 4 I + n_heads + 2 + len) bytes; bf16
autocast: 34 h + 8 I + 4 n_heads + 8 + 2 len. Once per model: the final norm and the lm_head's
input (4 (3 h + 1)), the rotary cos/sin (8 head_dim) and the padding mask (two [rows, len, len]
float32 copies: 8 len per token). bf16 autocast also keeps a bf16 copy of every weight it casts
(2 P; with checkpointing one layer's at a time; none under FSDP and DeepSpeed, whose gathered
weights are bf16 already). With gradient checkpointing a layer keeps only its float32 input
(4 h), and one layer's full set lives during its recompute. Vision blocks count the same way
(13 h_v + 4 I_v per patch), for `IMAGE_TOKEN_SHARE` of the tokens being image tokens of 4
patches each (2 x 2 merge); none when the tower is frozen.

What is not covered: FSDP's transient all-gathered layer and DeepSpeed's communication buffers
(a layer or two of bf16 weights), the KV cache a training forward builds and drops (2 kv per
layer and token, freed before backward), the allocator's fragmentation, and FSDP on CPU
processes (accelerate runs them as plain DDP; the plan counts the launch's FSDP as asked).
Without a padding mask (CUDA, equal rows) SDPA keeps key and value unrepeated: the plan is then
high by 2 (h - kv) per layer and token.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Literal

from beacon.engines.config import EngineConfig
from beacon.engines.registry import TINY_MODEL, check_model
from beacon.engines.tiny import cached_tiny_model
from beacon.errors import UserError
from beacon.train.core.config import LoraConfig, ModelConfig, TrainConfig

Sharding = Literal["none", "ddp", "fsdp", "zero1", "zero2", "zero3"]
SHARDINGS: tuple[str, ...] = ("none", "ddp", "fsdp", "zero1", "zero2", "zero3")

GiB = 1 << 30
CUDA_RESERVE = int(1.5 * GiB)
"""CUDA context, cuBLAS / attention workspaces and allocator slack: what `nvidia-smi` shows in
use beyond `torch.cuda.max_memory_allocated` on a real step (~1-1.5 GiB on H100s)."""
IMAGE_TOKEN_SHARE = 0.25
"""Share of a micro-batch's tokens the plan takes to be image tokens (one 1,024-token image in
4,096 tokens); the data decides the real share."""
LOGIT_COPIES = 4
"""[tokens, vocabulary] float32 tensors alive at the loss's backward: the logits, the float32
log-softmax (or log-sum-exp) output, its gradient and the logits' gradient."""


@dataclass(frozen=True)
class ModelShape:
    """What the plan reads of a checkpoint: parameter counts and the sizes of one layer."""

    params: int
    trainable: int
    vision_params: int
    layers: int
    heads: int
    hidden: int
    intermediate: int
    kv_hidden: int
    vocab: int
    vision_layers: int
    vision_hidden: int
    vision_intermediate: int


@dataclass(frozen=True)
class Launch:
    """Where the run trains: processes, sharding, precision, and each device's memory."""

    processes: int
    sharding: Sharding
    bf16: bool
    cuda: bool
    device_bytes: int


@dataclass(frozen=True)
class Workload:
    """What a recipe adds to the model's training: its micro-batch, teacher and engine."""

    tokens: int
    row: int
    logit_tokens: int
    teacher: ModelShape | None = None
    engine_rows: int = 0
    engine_tokens: int = 0


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes per device by row (`ROWS`), the total, and what the device has."""

    rows: dict[str, int]
    launch: Launch
    checkpointing: bool
    activations_other: int

    @property
    def total(self) -> int:
        """Every row summed: the device's expected peak."""
        return sum(self.rows.values())

    @property
    def fits(self) -> bool:
        """Whether the expected peak is within the device's memory."""
        return self.total <= self.launch.device_bytes


def model_shape(path: str, model: ModelConfig | None = None, key: str = "model.path") -> ModelShape:
    """Counts and sizes of the checkpoint at `path` (the setting `key`), built on the meta
    device; `model` decides what is trainable (frozen vision tower, LoRA)."""
    try:
        check_model(EngineConfig(name="hf", model=path))
    except UserError:
        raise UserError(
            f"{key}={path}: no such checkpoint folder, and not a cached hub model; give a "
            "checkpoint folder (beacon tiny make DIR builds a tiny one)"
        ) from None
    net = _meta_model(tiny_path(path))
    config = net.config
    named = dict(net.named_parameters())  # a tied lm_head is listed once
    params = sum(p.numel() for p in named.values())
    vision = sum(p.numel() for n, p in named.items() if "visual" in n)
    trainable = params - (vision if model is not None and model.freeze_vision else 0)
    if model is not None and model.lora is not None:
        trainable = lora_params(net, model.lora.target_modules, model.lora.r)
    text, tower = config.get_text_config(), getattr(config, "vision_config", None)
    heads = text.num_attention_heads
    vision_hidden = getattr(tower, "embed_dim", None) or getattr(tower, "hidden_size", 0)
    vision_mlp = getattr(tower, "intermediate_size", None)
    return ModelShape(
        params=params,
        trainable=trainable,
        vision_params=vision,
        layers=text.num_hidden_layers,
        heads=heads,
        hidden=text.hidden_size,
        intermediate=text.intermediate_size,
        kv_hidden=text.hidden_size // heads * getattr(text, "num_key_value_heads", heads),
        vocab=text.vocab_size,
        vision_layers=getattr(tower, "depth", 0),
        vision_hidden=vision_hidden,
        vision_intermediate=vision_mlp or vision_hidden * getattr(tower, "mlp_ratio", 4),
    )


@lru_cache(maxsize=4)
def _meta_model(path: str) -> Any:
    """The checkpoint's model with no storage (the meta device): seconds even at 7B, and kept,
    as each remedy plans again."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    with torch.device("meta"):
        return AutoModelForImageTextToText.from_config(AutoConfig.from_pretrained(path))


def tiny_path(path: str) -> str:
    """`path`, or the built-in tiny model's folder for `tiny`."""
    if path != TINY_MODEL:
        return path

    return str(cached_tiny_model("qwen2_vl"))


def lora_params(net: Any, targets: list[str], r: int) -> int:
    """LoRA's trainable parameters: r x (in + out) for every linear layer whose name ends in a
    target (peft's rule, the vision tower's matching layers included)."""
    import torch

    return sum(
        r * (module.in_features + module.out_features)
        for name, module in net.named_modules()
        if isinstance(module, torch.nn.Linear)
        and any(name == t or name.endswith(f".{t}") for t in targets)
    )


def layer_activation_bytes(shape: ModelShape, row: int, bf16: bool) -> int:
    """Bytes one decoder layer keeps for backward per token in rows of `row` (module
    docstring)."""
    h, i, heads = shape.hidden, shape.intermediate, shape.heads
    if bf16:
        return 34 * h + 8 * i + 4 * heads + 8 + 2 * row
    return 4 * (10 * h + 4 * i + heads + 2 + row)


def activation_bytes(
    shape: ModelShape, tokens: int, row: int, bf16: bool, checkpointing: bool, vision: bool
) -> int:
    """Activations of a micro-batch of `tokens` tokens in rows of at most `row`: the language
    model's layers and once-per-model tensors and, when the vision tower trains (`vision`),
    its blocks (`IMAGE_TOKEN_SHARE`)."""
    layer = layer_activation_bytes(shape, row, bf16)
    once = tokens * (4 * (3 * shape.hidden + 1) + 8 * shape.hidden // shape.heads + 8 * row)
    patches = 4 * int(tokens * IMAGE_TOKEN_SHARE) if vision else 0
    hv, iv = shape.vision_hidden, shape.vision_intermediate
    block = (13 * hv + 4 * iv) * (2 if bf16 else 4) + (4 * hv if bf16 else 0)
    if not checkpointing:
        return once + tokens * layer * shape.layers + patches * block * shape.vision_layers
    kept = 4 * (tokens * shape.hidden * shape.layers + patches * hv * shape.vision_layers)
    return once + kept + max(tokens * layer, patches * block)


def plan_memory(
    shape: ModelShape, model: ModelConfig, launch: Launch, work: Workload
) -> MemoryPlan:
    """The per-device rows of `model` trained under `launch` with `work` (module docstring)."""
    n, sharding = launch.processes, launch.sharding
    deepspeed = sharding.startswith("zero")
    half = deepspeed and launch.bf16
    params_split = n if sharding in ("fsdp", "zero3") else 1
    grads_split = n if sharding in ("fsdp", "zero2", "zero3") else 1
    state_split = n if sharding != "none" and sharding != "ddp" else 1
    lora_extra = shape.trainable if model.lora is not None else 0
    grads = (2 if half else 4) * shape.trainable // grads_split
    vision_trained = not model.freeze_vision or model.lora is not None
    act = activation_bytes(shape, work.tokens, work.row, launch.bf16, True, vision_trained)
    no_ckpt = activation_bytes(shape, work.tokens, work.row, launch.bf16, False, vision_trained)
    copies = 0
    if launch.bf16 and sharding in ("none", "ddp"):
        ckpt = model.gradient_checkpointing
        copies = 2 * (shape.params // shape.layers if ckpt else shape.params)
    rows = {
        "parameters": (2 if half else 4) * (shape.params + lora_extra) // params_split,
        "master weights": 4 * shape.trainable // state_split if half else 0,
        "gradients": grads * (2 if sharding == "ddp" and n > 1 else 1),
        "optimizer (AdamW)": 8 * shape.trainable // state_split,
        "activations": act if model.gradient_checkpointing else no_ckpt,
        "bf16 weight copies": copies,
        "logits": LOGIT_COPIES * work.logit_tokens * shape.vocab * 4,
        "teacher": 0 if work.teacher is None else 4 * work.teacher.params,
        "rollout engine": engine_bytes(shape, work, launch.cuda),
        "reserve": CUDA_RESERVE if launch.cuda else 0,
    }
    other = no_ckpt if model.gradient_checkpointing else act
    return MemoryPlan(rows, launch, model.gradient_checkpointing, other)


def engine_bytes(shape: ModelShape, work: Workload, cuda: bool) -> int:
    """The in-process hf engine: its copy of the weights (bf16 on CUDA, float32 on CPU) and the
    KV cache of `engine_rows` rows of `engine_tokens`."""
    if work.engine_rows == 0:
        return 0
    size = 2 if cuda else 4
    kv_cache = work.engine_rows * work.engine_tokens * shape.layers * 2 * shape.kv_hidden * size
    return size * shape.params + kv_cache


def render(plan: MemoryPlan, title: str) -> str:
    """The plan as a table: GiB per device by row, the total against the device, and the
    activations had checkpointing the other setting."""
    launch = plan.launch
    where = f"{launch.processes} x {'cuda' if launch.cuda else 'cpu'} {launch.sharding}"
    precision = "bf16 autocast" if launch.bf16 else "float32"
    lines = [f"memory plan: {title} ({where}, {precision}), GiB per device"]
    for name, value in plan.rows.items():
        lines.append(f"  {name:<20} {value / GiB:9.2f}")
    verdict = "fits" if plan.fits else "DOES NOT FIT"
    lines.append(
        f"  {'total':<20} {plan.total / GiB:9.2f} of {launch.device_bytes / GiB:.2f}: {verdict}"
    )
    other = "off" if plan.checkpointing else "on"
    lines.append(
        f"  (activations with gradient checkpointing {other}: {plan.activations_other / GiB:.2f})"
    )
    return "\n".join(lines)


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
