"""Set-up every trainer shares: `open_run` (accelerator, memory plan, run folder checked and
claimed, RNGs seeded, the `train.report_to` trackers started), `build_policy` (the checkpoint with
LoRA / gradient checkpointing / frozen vision as set, AdamW with linear warm-up and cosine decay,
prepared for the launch's processes) and `save_model`. A recipe calls them, adds its own parts
and hands a step function to `loop.run`.
"""

from __future__ import annotations

import copy
import logging
import shutil
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Protocol

from beacon.engines.patch_embed import linear_patch_embeddings
from beacon.engines.tokenizer import load_processor
from beacon.runfolder import check_run_folder, write_run_config
from beacon.train.core.config import OPERATIONAL_KEYS, LoraConfig, ModelConfig, TrainConfig
from beacon.train.core.memory_check import accelerator_launch, check_plan
from beacon.train.core.metrics import check_trackers, start_trackers, tracker_dir
from beacon.train.core.train_loop import LoopParts

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
    import torch
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
    (`beacon.train.core.memory_plan`).

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
    import torch
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
    import torch
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
