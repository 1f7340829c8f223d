"""Cold-start SFT recipe (beacon.md §3): wiring only.

config -> tokenizer, trajectories (encoded, masks from segments), model (+ LoRA, gradient
checkpointing), optimizer, cosine schedule -> `loop.run`. The objective is Eq. 1 of
`beacon.train.loss`: cross-entropy on generated segments only.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from beacon.train import loop
from beacon.train.checkpoint import TrainState
from beacon.train.collate import ModelBatch, PixelCache, collate, plan_buckets, plan_padded
from beacon.train.config import SFTConfig
from beacon.train.encode import EncodedTrajectory, check_image_tokens, encode_trajectory
from beacon.train.rundir import check_run_dir, write_config
from beacon.types import Trajectory

logger = logging.getLogger(__name__)

DATA_FILE = "data.json"  # {"trajectories": trained, "dropped_too_long": n}, written at start
_WEIGHT_FILES = (".safetensors", ".bin", ".pt", ".pth")
_MODEL_CONFIG_FILES = ("config.json", "generation_config.json", "model.safetensors.index.json")


@dataclass
class SFTData:
    """The encoded training set and what collating it needs."""

    rows: list[EncodedTrajectory]
    pad_token_id: int
    image_token_id: int | None
    pixels: PixelCache | None
    dropped_too_long: int


def read_trajectories(paths: Sequence[str]) -> list[Trajectory]:
    """Trajectories from JSONL files (a line may also wrap one as {"trajectory": {...}})."""
    out = []
    for path in paths:
        for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            data = json.loads(line)
            data = data.get("trajectory", data)
            if not isinstance(data, dict) or "segments" not in data:
                raise ValueError(f"{path}:{n} is not a trajectory (no 'segments' key)")
            out.append(Trajectory.from_dict(data))
    return out


def build_data(cfg: SFTConfig, tokenizer: Any, processor: Any | None) -> SFTData:
    """Encode every trajectory of `data.train`; too-long ones are dropped and counted."""
    from beacon.images import ImageStore

    store = ImageStore(cfg.data.images) if cfg.data.images else None
    load = store.get if store is not None else None
    header = store.header if store is not None else None  # tokens need sizes, not pixels
    rows, too_long = [], 0
    for traj in read_trajectories(cfg.data.train):
        encoded = encode_trajectory(traj, tokenizer, header)
        if len(encoded) > cfg.data.max_length:
            too_long += 1
            continue
        rows.append(encoded)
    if too_long:
        logger.warning(
            "dropped %d trajectories longer than data.max_length=%d tokens",
            too_long,
            cfg.data.max_length,
        )
    if not rows:
        raise ValueError(
            f"no trajectory to train on in {cfg.data.train} ({too_long} too long); check the files "
            "or raise data.max_length"
        )
    pixels = None
    if processor is not None and load is not None:
        pixels = PixelCache(processor.image_processor, load)
    return SFTData(
        rows=rows,
        pad_token_id=tokenizer.pad_token_id,
        image_token_id=tokenizer.image_token_id,
        pixels=pixels,
        dropped_too_long=too_long,
    )


def make_plan(data: SFTData, cfg: SFTConfig) -> loop.PlanFn:
    """Share indices -> micro-batches, bucketed or naively padded as `train.batching` says."""

    def plan(indices: Sequence[int]) -> list[ModelBatch]:
        rows = [data.rows[i] for i in indices]
        if cfg.train.batching == "bucket":
            groups = plan_buckets(
                [len(r) for r in rows],
                cfg.train.max_tokens_per_microbatch,
                cfg.train.microbatch_cost_tokens,
            )
        else:
            groups = plan_padded(len(rows), cfg.train.micro_batch_size)
        return [_collate_checked(data, [rows[i] for i in group]) for group in groups]

    return plan


def _collate_checked(data: SFTData, rows: list[EncodedTrajectory]) -> ModelBatch:
    if data.pixels is not None and data.image_token_id is not None:
        for row in rows:
            check_image_tokens(
                row, data.image_token_id, [data.pixels.tokens(k) for k in row.images]
            )
    return collate(rows, data.pad_token_id, data.image_token_id, data.pixels)


def load_model(cfg: SFTConfig) -> Any:
    """The checkpoint in float32 (autocast gives bf16 compute), with LoRA / checkpointing."""
    import torch
    from transformers import AutoModelForImageTextToText

    from beacon.engines.patch_embed import linear_patch_embeddings

    model = AutoModelForImageTextToText.from_pretrained(cfg.model.path, dtype=torch.float32)
    linear_patch_embeddings(model)
    if cfg.model.freeze_vision:
        for name, param in model.named_parameters():
            if "visual" in name:
                param.requires_grad_(False)
    if cfg.model.gradient_checkpointing:
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.2x
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        model.config.use_cache = False
    if cfg.model.lora is not None:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError:
            raise ImportError(
                "model.lora needs peft; install it with `pip install 'beacon-vr[lora]'` or "
                "remove model.lora to train all weights"
            ) from None

        lora = cfg.model.lora
        model = get_peft_model(
            model,
            LoraConfig(
                r=lora.r,
                lora_alpha=lora.alpha,
                lora_dropout=lora.dropout,
                target_modules=lora.target_modules,
            ),
        )
    return model


def make_accelerator(cfg: SFTConfig) -> Any:
    import torch
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs

    precision = cfg.model.mixed_precision
    if precision == "auto":
        bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        precision = "bf16" if bf16 else "no"
    ddp = DistributedDataParallelKwargs(find_unused_parameters=cfg.train.ddp_find_unused_parameters)
    # cpu=True on a machine without CUDA: only then does accelerate join the processes of a
    # torchrun / `accelerate launch --multi_gpu` launch into one gloo group (MULTI_CPU)
    return Accelerator(
        mixed_precision=precision, kwargs_handlers=[ddp], cpu=not torch.cuda.is_available()
    )


def build_parts(cfg: SFTConfig, accelerator: Any) -> tuple[loop.LoopParts, SFTData]:
    """Everything the loop needs, prepared by `accelerator`."""
    import torch
    from accelerate.utils import set_seed
    from transformers import get_cosine_with_min_lr_schedule_with_warmup

    from beacon.engines.tokenizer import HFTokenizer

    set_seed(cfg.train.seed)
    tokenizer = HFTokenizer.from_pretrained(cfg.model.path)
    data = build_data(cfg, tokenizer, tokenizer.processor)
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
    parts = loop.LoopParts(
        accelerator=accelerator,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        dataset_size=len(data.rows),
        plan=make_plan(data, cfg),
        save_model=lambda folder: save_model(accelerator, model, cfg, folder),
    )
    return parts, data


def save_model(accelerator: Any, model: Any, cfg: SFTConfig, folder: Path) -> None:
    """`save_pretrained` weights (LoRA merged, adapter kept in `adapter/`) + processor files."""
    import copy

    state_dict = accelerator.get_state_dict(model)
    if not accelerator.is_main_process:
        return
    unwrapped = accelerator.unwrap_model(model)
    if cfg.model.lora is not None:
        unwrapped.save_pretrained(folder / "adapter", state_dict=state_dict)
        merged = copy.deepcopy(unwrapped).merge_and_unload()
        merged.save_pretrained(folder)
    else:
        unwrapped.save_pretrained(folder, state_dict=state_dict)
    _copy_processor_files(Path(cfg.model.path), folder)


def _copy_processor_files(source: Path, folder: Path) -> None:
    """Tokenizer, processor and template files of the base checkpoint, byte for byte."""
    if not source.is_dir():
        from beacon.engines.tokenizer import load_processor

        processor, tokenizer = load_processor(str(source))
        (processor or tokenizer).save_pretrained(folder)
        return
    for path in source.iterdir():
        keep = path.is_file() and not path.name.endswith(_WEIGHT_FILES)
        if keep and path.name not in _MODEL_CONFIG_FILES:
            shutil.copy2(path, folder / path.name)


def run_sft(cfg: SFTConfig, resume: bool = False) -> TrainState:
    """Train `cfg` into `train.output_dir`; `resume` continues from its newest checkpoint."""
    accelerator = make_accelerator(cfg)
    run_dir = Path(cfg.train.output_dir)
    check_run_dir(run_dir, cfg, resume)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        write_config(run_dir, cfg)
    accelerator.wait_for_everyone()
    parts, data = build_parts(cfg, accelerator)
    logger.info(
        "SFT on %d trajectories (%d dropped as too long), %d processes",
        len(data.rows),
        data.dropped_too_long,
        accelerator.num_processes,
    )
    if accelerator.is_main_process:  # the count a reader will doubt, kept beside the metrics
        counts = {"trajectories": len(data.rows), "dropped_too_long": data.dropped_too_long}
        (run_dir / DATA_FILE).write_text(json.dumps(counts) + "\n")
    state = loop.run(parts, cfg.train, run_dir, resume)
    accelerator.end_training()
    return state
