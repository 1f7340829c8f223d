"""Training configs as pydantic models, and a small YAML + ``--set`` loader for them.

Every setting is declared once, with its default and a `Field(description=...)` that is its
documentation (STYLE.md §5). `extra="forbid"` turns a typo into an error that names the key.

`load_train_config` is a stop-gap: the project-wide pydantic loader (``load_config(Model, path,
overrides)``) replaces it, and this module then keeps only the models.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

OPERATIONAL_KEYS = frozenset(
    {"train.keep_last", "train.log_every", "train.progress_bar", "train.tensorboard"}
)
"""Keys that may differ between a run and its resume: they change how a run reports, not what
it computes. Every other key is part of the run's identity."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class LoraConfig(_Strict):
    """LoRA adapters through `peft`; the base weights stay frozen."""

    r: int = Field(16, ge=1, description="LoRA rank r.")
    alpha: float = Field(32.0, gt=0, description="LoRA scale alpha (the update is alpha/r * BA).")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the LoRA input.")
    target_modules: list[str] = Field(
        default_factory=lambda: [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ],
        description="Names of the linear layers that get adapters (Qwen-VL language model).",
    )


class ModelConfig(_Strict):
    """The checkpoint to train and how to hold it."""

    path: str = Field(..., description="Hugging Face checkpoint folder (or hub id already cached).")
    lora: LoraConfig | None = Field(None, description="Train LoRA adapters instead of all weights.")
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in backward to save memory."
    )
    mixed_precision: Literal["auto", "no", "bf16"] = Field(
        "auto", description="'auto' uses bf16 on a GPU that supports it, full precision elsewhere."
    )
    freeze_vision: bool = Field(
        False, description="Keep the vision tower frozen (full fine-tuning of the rest)."
    )


class DataConfig(_Strict):
    """Where the trajectories and their images are."""

    train: list[str] = Field(
        ..., min_length=1, description="Trajectory JSONL files (one Trajectory per line)."
    )
    images: str | None = Field(
        None, description="ImageStore folder holding the trajectories' images by key."
    )
    max_length: int = Field(
        4096, ge=8, description="Trajectories longer than this many tokens are dropped (counted)."
    )


class TrainConfig(_Strict):
    """The optimisation and the run folder."""

    output_dir: str = Field(..., description="Run folder: config, metrics, checkpoints.")
    seed: int = Field(0, description="Seed for data order, initialisation of adapters and RNG.")
    max_steps: int = Field(100, ge=1, description="Optimizer steps in the whole run.")
    global_batch_size: int = Field(
        8, ge=1, description="Trajectories per optimizer step, over all processes."
    )
    batching: Literal["bucket", "pad"] = Field(
        "bucket",
        description="'bucket': sort each process's share by length and fill micro-batches up to "
        "max_tokens_per_microbatch; 'pad': micro-batches of micro_batch_size in data order.",
    )
    max_tokens_per_microbatch: int = Field(
        8192, ge=1, description="bucket: padded tokens (rows x longest) per micro-batch."
    )
    microbatch_cost_tokens: int = Field(
        256,
        ge=0,
        description="bucket: fixed cost of one micro-batch in token-equivalents; the planner "
        "trades padding against the number of micro-batches with it (raise it on GPUs).",
    )
    micro_batch_size: int = Field(4, ge=1, description="pad: trajectories per micro-batch.")
    lr: float = Field(1e-5, gt=0, description="Peak learning rate.")
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="Cosine floor as a share of lr.")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up steps.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    max_grad_norm: float | None = Field(
        1.0, description="Clip the global gradient norm; null: off."
    )
    save_every: int = Field(
        50, ge=1, description="Checkpoint every this many steps (and at the end)."
    )
    keep_last: int = Field(2, ge=1, description="Checkpoints kept; older ones are deleted.")
    log_every: int = Field(1, ge=1, description="Write metrics every this many steps.")
    progress_bar: bool = Field(True, description="Show a tqdm bar on the main process.")
    tensorboard: bool = Field(True, description="Also log to TensorBoard when it is installed.")
    ddp_find_unused_parameters: bool = Field(
        True,
        description="DDP only: allow parameters without gradient in a step (the vision tower on "
        "a text-only micro-batch). Turn off for speed when every batch has images.",
    )


class SFTConfig(_Strict):
    """Cold-start SFT: cross-entropy on generated segments only (beacon.md §3)."""

    model: ModelConfig
    data: DataConfig
    train: TrainConfig

    @model_validator(mode="after")
    def _check(self) -> SFTConfig:
        if self.train.warmup_steps >= self.train.max_steps:
            raise ValueError(
                f"train.warmup_steps={self.train.warmup_steps} must be below "
                f"train.max_steps={self.train.max_steps}; lower --set train.warmup_steps"
            )
        return self


class TrainConfigError(ValueError):
    """Every problem of one config file, one per line, each naming the key."""


def load_train_config(
    model: type[BaseModel], path: str | Path | None, overrides: list[str] = ()
) -> BaseModel:
    """`model` from a YAML file with ``key.sub=value`` overrides (values parsed as YAML).

    Stop-gap for the shared pydantic loader; see the module docstring.
    """
    data: dict[str, Any] = {}
    if path is not None:
        data = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(data, dict):
            raise TrainConfigError(f"config file {path} must hold a mapping at the top level")
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise TrainConfigError(f"--set {item!r}: expected key=value, e.g. train.lr=1e-5")
        _set_path(data, key.strip().split("."), yaml.safe_load(value))
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = [
            f"  {'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}"
            + _did_you_mean(model, err)
            for err in exc.errors()
        ]
        raise TrainConfigError(
            f"config error in {path or 'overrides'} ({len(lines)} problem(s)):\n" + "\n".join(lines)
        ) from None


def _did_you_mean(model: type[BaseModel], err: dict[str, Any]) -> str:
    """'; did you mean train.lr?' for an unknown key close to a declared one."""
    if err["type"] != "extra_forbidden":
        return ""
    *parents, key = [str(p) for p in err["loc"]]
    owner: Any = model
    for name in parents:
        field = owner.model_fields.get(name) if isinstance(owner, type) else None
        owner = _model_of(field.annotation) if field is not None else None
    if owner is None:
        return ""
    close = difflib.get_close_matches(key, list(owner.model_fields), n=1)
    return f"; did you mean {'.'.join([*parents, close[0]])}?" if close else ""


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside `annotation` (`M` or `M | None`), or None."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _set_path(data: dict[str, Any], keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        child = data.get(key)
        if not isinstance(child, dict):
            child = data[key] = {}
        data = child
    data[keys[-1]] = value


def config_to_yaml(config: BaseModel) -> str:
    """The resolved config as YAML (every field, defaults included)."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


def identity_diff(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Dotted keys whose values differ between two resolved configs, operational keys left out."""
    flat_saved, flat_current = _flatten(saved), _flatten(current)
    keys = sorted(set(flat_saved) | set(flat_current))
    return [
        k
        for k in keys
        if k not in OPERATIONAL_KEYS
        and flat_saved.get(k, "<unset>") != flat_current.get(k, "<unset>")
    ]


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(data, dict):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out
