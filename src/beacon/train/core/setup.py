"""Set-up every trainer shares: `open_run` (accelerator, memory plan, run folder checked and
claimed, RNGs seeded, the `train.report_to` trackers started), `build_policy` (the checkpoint with
LoRA / gradient checkpointing / frozen vision as set, AdamW with linear warm-up and cosine decay,
prepared for the launch's processes) and `save_model`; for the RL trainers (`beacon train grpo`,
`beacon train opd`) also the rollout engine and how new weights reach it. A recipe calls them,
adds its own parts and hands a step function to `loop.run`.

**The rollout engine.** `rollout_engine` builds the in-process `hf` engine (weights copied in
with `load_weights`), or, with `rollout.servers`, one `openai` engine per `beacon serve` process
behind a `beacon.engines.spread.SpreadEngine`, new weights pushed to every server with
`beacon.engines.weights.push_weights` and the servers' API key (`rollout.server_api_key_env`),
cast to each server's dtypes and in bodies of at most `rollout.push_chunk_mb` of tensors; each
server checks a push whole before it applies any of it.

`WeightSync` pushes the trainer's weights (`trainer_weights`: whole tensors, also where the
launch shards them) into the engine: every process into its own in-process engine, or the main
process alone into the servers all processes share, the others waiting until it is done so no
process rolls out on a server that is still being written.

What is not covered: vLLM servers (they need vLLM's own weight-update path); DeepSpeed ZeRO-3
gathering is written after TRL's and has not run (DeepSpeed is not installed in the tests).

**LoRA** (`rollout_state_dict`): the weights a rollout engine loads from a LoRA policy: each
adapted layer's base weight plus its adapter's update, under the base model's own parameter
names. Computed beside the training model, never in it. peft's `merge_adapter()` then
`unmerge_adapter()` would add the update into the frozen base weight and subtract it again, which
leaves float error in weights that must not change (a resumed run would drift from an
uninterrupted one); `merge_and_unload()` on a copy holds the model twice each step. Here only the
adapted layers' merged weights are new tensors. The merge reads tensors from a state dict (the
unwrapped model's, or the whole tensors a sharded launch gathered: `trainer_weights`) and only
the adapters' names and scales from the modules, so it works on any launch.

What is not covered: adapters on embeddings or convolutions, DoRA and `fan_in_fan_out` layers
(Beacon targets plain linear layers, `model.lora.target_modules`), `modules_to_save`.
"""

from __future__ import annotations

import copy
import logging
import shutil
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import Tensor

from beacon.engines.hf import HFEngine
from beacon.engines.openai import OpenAIEngine
from beacon.engines.patch_embed import linear_patch_embeddings
from beacon.engines.registry import key_from_env
from beacon.engines.spread import SpreadEngine
from beacon.engines.tokenizer import HFTokenizer, load_processor
from beacon.engines.weights import push_weights
from beacon.runfolder import check_run_folder, write_run_config
from beacon.train.core.config import (
    OPERATIONAL_KEYS,
    LoraConfig,
    ModelConfig,
    ServedRolloutConfig,
    TrainConfig,
)
from beacon.train.core.memory import accelerator_launch, check_plan
from beacon.train.core.metrics import check_trackers, start_trackers, tracker_dir
from beacon.train.core.train_loop import LoopParts

if TYPE_CHECKING:
    from beacon.engines.hf import LogitsProcessorFactory

logger = logging.getLogger(__name__)

_WEIGHT_FILES = (".safetensors", ".bin", ".pt", ".pth")
_MODEL_CONFIG_FILES = ("config.json", "generation_config.json", "model.safetensors.index.json")


class RecipeConfig(Protocol):
    """What `open_run` reads of a recipe's config (every recipe config has both sections)."""

    model: ModelConfig
    train: TrainConfig


def make_accelerator(model: ModelConfig, train: TrainConfig) -> Any:
    """The run's `Accelerator`: bf16 on a GPU that supports it when `model.mixed_precision` is
    auto, DDP told whether parameters may go without gradient in a step, the trackers of
    `train.report_to` (`MissingTracker` when one's package is not installed)."""
    check_trackers(train.report_to)
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs, ProjectConfiguration

    precision = model.mixed_precision
    if precision == "auto":
        bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        precision = "bf16" if bf16 else "no"
    ddp = DistributedDataParallelKwargs(find_unused_parameters=train.ddp_find_unused_parameters)
    # cpu=True on a machine without CUDA: only then does accelerate join the processes of a
    # torchrun / `accelerate launch --multi_gpu` launch into one gloo group (MULTI_CPU)
    return Accelerator(
        mixed_precision=precision,
        kwargs_handlers=[ddp],
        cpu=not torch.cuda.is_available(),
        log_with=list(train.report_to) or None,
        project_config=ProjectConfiguration(logging_dir=str(tracker_dir(train.output_dir))),
    )


def open_run(
    cfg: RecipeConfig,
    resume: bool,
    operational: Collection[str] = OPERATIONAL_KEYS,
    per_process: Mapping[str, int] | None = None,
) -> tuple[Any, Path]:
    """The accelerator and the run folder, checked (`check_run_folder`) and holding `config.yaml`;
    every RNG seeded from `train.seed`; the trackers of `train.report_to` started. First the
    memory plan is printed, and a run that cannot fit its device stops
    (`beacon.train.core.memory`).

    `per_process` names the settings (key -> value) a step splits over the processes; one that
    the launch's process count does not divide is refused before anything is written.
    """
    from accelerate.utils import set_seed

    accelerator = make_accelerator(cfg.model, cfg.train)
    say = logger.info if accelerator.is_main_process else lambda _: None
    check_plan(cfg, accelerator_launch(accelerator), type(cfg).__name__, say)  # loads nothing
    for key, value in (per_process or {}).items():
        if value % accelerator.num_processes:
            raise ValueError(
                f"{key}={value} is not divisible by the {accelerator.num_processes} processes; "
                "set it to a multiple of the process count"
            )
    run_dir = Path(cfg.train.output_dir)
    check_run_folder(
        run_dir, cfg, operational, folder_setting="train.output_dir", resume=resume, write=False
    )
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        write_run_config(run_dir, cfg, operational)
    accelerator.wait_for_everyone()
    start_trackers(accelerator, cfg, run_dir)
    set_seed(cfg.train.seed)
    return accelerator, run_dir


def load_model(cfg: ModelConfig) -> Any:
    """The checkpoint in float32 (autocast gives bf16 compute), with LoRA / checkpointing."""
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(cfg.path, dtype=torch.float32)
    linear_patch_embeddings(model)
    if cfg.freeze_vision:
        for name, param in model.named_parameters():
            if "visual" in name:
                param.requires_grad_(False)
    if cfg.gradient_checkpointing:
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.2x
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        model.config.use_cache = False
    if cfg.lora is not None:
        model = _with_lora(model, cfg.lora)
    return model


def _with_lora(model: Any, lora: LoraConfig) -> Any:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ImportError(
            "model.lora needs peft; install it with `pip install 'beacon-vr[lora]'` or "
            "remove model.lora to train all weights"
        ) from None
    return get_peft_model(
        model,
        LoraConfig(
            r=lora.r,
            lora_alpha=lora.alpha,
            lora_dropout=lora.dropout,
            target_modules=lora.target_modules,
        ),
    )


def build_optimizer(model: Any, cfg: TrainConfig) -> tuple[Any, Any]:
    """AdamW over the trainable parameters, and its schedule: linear warm-up over
    `warmup_steps`, then cosine decay to `min_lr_ratio` x `lr` at `max_steps`."""
    from transformers import get_cosine_with_min_lr_schedule_with_warmup

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    scheduler = get_cosine_with_min_lr_schedule_with_warmup(
        optimizer,
        num_warmup_steps=cfg.warmup_steps,
        num_training_steps=cfg.max_steps,
        min_lr_rate=cfg.min_lr_ratio,
    )
    return optimizer, scheduler


def build_policy(model_cfg: ModelConfig, train_cfg: TrainConfig, accelerator: Any) -> LoopParts:
    """The model to train with its optimizer and schedule, prepared by `accelerator`; the
    schedule is registered for checkpointing (see `loop`, deviation 1)."""
    model = load_model(model_cfg)
    optimizer, scheduler = build_optimizer(model, train_cfg)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(scheduler)
    return LoopParts(
        accelerator=accelerator,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        save_model=lambda folder: save_model(accelerator, model, model_cfg, folder),
    )


def save_model(accelerator: Any, model: Any, cfg: ModelConfig, folder: Path) -> None:
    """`save_pretrained` weights (LoRA merged, adapter kept in `adapter/`) + processor files."""
    state_dict = accelerator.get_state_dict(model)
    if not accelerator.is_main_process:
        return
    unwrapped = accelerator.unwrap_model(model)
    if cfg.lora is not None:
        unwrapped.save_pretrained(folder / "adapter", state_dict=state_dict)
        merged = copy.deepcopy(unwrapped).merge_and_unload()
        merged.save_pretrained(folder)
    else:
        unwrapped.save_pretrained(folder, state_dict=state_dict)
    _copy_processor_files(Path(cfg.path), folder)


def _copy_processor_files(source: Path, folder: Path) -> None:
    """Tokenizer, processor and template files of the base checkpoint, byte for byte."""
    if not source.is_dir():
        processor, tokenizer = load_processor(str(source))
        (processor or tokenizer).save_pretrained(folder)
        return
    for path in source.iterdir():
        keep = path.is_file() and not path.name.endswith(_WEIGHT_FILES)
        if keep and path.name not in _MODEL_CONFIG_FILES:
            shutil.copy2(path, folder / path.name)


Push = Callable[[Mapping[str, torch.Tensor]], None]
"""Puts a state dict (whole tensors, the engine's parameter names) into the rollout engine."""


@dataclass
class WeightSync:
    """The engine rollouts run on, how weights reach it, and whether all processes share it
    (servers: the main process pushes) or each has its own (in-process: each pushes)."""

    engine: Any
    push: Push
    shared: bool

    def __call__(self, accelerator: Any, model: torch.nn.Module) -> None:
        """Push the current weights of `model` (as `accelerator.prepare` returned it); a
        collective call: every process calls it after every optimizer step."""
        weights = trainer_weights(accelerator, model)
        if not self.shared or accelerator.is_main_process:
            self.push(weights)
        if self.shared:
            accelerator.wait_for_everyone()


def rollout_engine(
    model_path: str,
    rollout: ServedRolloutConfig,
    device: str,
    batch_size: int,
    tokenizer: Any = None,
    logits_processors: LogitsProcessorFactory | None = None,
) -> WeightSync:
    """The engine rollouts run on (in-process `hf` of `model_path`, or the servers of
    `rollout.servers`), and how new weights reach it; `tokenizer` is the run's handle of
    `model_path`'s tokenizer and processor (loaded here when None).

    `logits_processors` builds the in-process engine's processors from the tokenizer (tests
    steer the tiny model with `beacon.fakes.logits`); servers sample with their own, so it is
    refused with `rollout.servers`."""
    tokenizer = tokenizer or HFTokenizer.from_pretrained(model_path)
    if not rollout.servers:
        processors = logits_processors(tokenizer) if logits_processors else None
        engine = HFEngine(
            model_path,
            device=device,
            batch_size=batch_size,
            tokenizer=tokenizer,
            logits_processors=processors,
        )
        return WeightSync(engine, engine.load_weights, shared=False)
    if logits_processors is not None:
        raise ValueError(
            "logits_processors apply to the in-process engine, but rollout.servers is set: each "
            "`beacon serve` process samples with its own engine; give the processors to those"
        )

    key = key_from_env(rollout.server_api_key_env, required_by="rollout.server_api_key_env")
    engines = [
        OpenAIEngine(
            base_url=url,
            model=rollout.server_model,
            api_key=key,
            tokenizer=tokenizer,
            concurrency=rollout.concurrency,
            timeout_s=rollout.server_timeout_s,
            vllm_extensions="on",  # training needs token ids: a server refusing them is an error
        )
        for url in rollout.servers
    ]
    servers, timeout = rollout.servers, rollout.server_timeout_s
    chunk_bytes = rollout.push_chunk_mb << 20
    return WeightSync(
        SpreadEngine(engines),
        lambda sd: push_weights(servers, sd, timeout, key, chunk_bytes),
        shared=True,
    )


def trainer_weights(accelerator: Any, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole weights of the prepared `model` on this process, as the rollout engine names
    them: FSDP2 gathers its shards (every process gets every tensor), DeepSpeed ZeRO-3 gathers
    its partitions for the copy, otherwise the unwrapped model's own `state_dict`; with LoRA,
    the adapters merged into their base weights (`rollout_state_dict`)."""
    unwrapped = accelerator.unwrap_model(model)
    if accelerator.is_fsdp2:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        whole = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
        return rollout_state_dict(unwrapped, whole)
    plugin = accelerator.state.deepspeed_plugin
    if plugin is not None and plugin.zero_stage == 3:
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(model.parameters())):
            whole = {k: v.detach().clone() for k, v in unwrapped.state_dict().items()}
        return rollout_state_dict(unwrapped, whole)
    return rollout_state_dict(unwrapped)


_PEFT_PREFIX = "base_model.model."


def is_peft_model(model: Any) -> bool:
    """Whether `model` is a peft model (False where peft is not installed)."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def rollout_state_dict(
    model: Any, state_dict: Mapping[str, Tensor] | None = None
) -> dict[str, Tensor]:
    """The state dict a rollout engine loads (`HFEngine.load_weights`, a weight push).

    `state_dict` holds `model`'s whole tensors by its own names (default: `model.state_dict()`).
    A plain model gives it back as it is. A peft model gives its base model's parameter names
    with W + (alpha / r) B A in each adapted linear layer and no adapter tensors, so the result
    loads into the checkpoint the run started from.
    """
    weights = dict(model.state_dict() if state_dict is None else state_dict)
    if not is_peft_model(model):
        return weights
    from peft.tuners.lora import LoraLayer

    updates: dict[str, Tensor] = {}
    with torch.no_grad():
        for name, module in model.named_modules():
            if not isinstance(module, LoraLayer) or module.merged:
                continue
            for adapter in module.active_adapters:
                if adapter not in module.lora_A:
                    continue
                a = weights[f"{name}.lora_A.{adapter}.weight"]
                b = weights[f"{name}.lora_B.{adapter}.weight"]
                delta = (b @ a) * module.scaling[adapter]
                key = f"{name}.base_layer.weight"
                updates[key] = updates[key] + delta if key in updates else delta
        merged: dict[str, Tensor] = {}
        for key, value in weights.items():
            if ".lora_" in key:
                continue
            if key in updates:
                value = value + updates[key].to(value.dtype)
            merged[key.removeprefix(_PEFT_PREFIX).replace(".base_layer.", ".")] = value
    return merged
