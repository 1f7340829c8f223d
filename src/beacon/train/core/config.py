"""The settings every trainer shares: the model to train (`model:`) and the loop (`train:`).

Every setting is declared once, with its default and a `Field(description=...)` that is its
documentation (STYLE.md §5). `extra="forbid"` turns a typo into an error that names the key.
Each recipe's config (`SFTConfig`, `GRPOConfig`, `OPDConfig`, `RFTConfig`) holds these two
sections beside its own, and loads through `beacon.config.load_config`, which reports every
problem of a file and its ``--set`` overrides at once, with did-you-mean.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from beacon.config import StrictModel, env_var_name

OPERATIONAL_KEYS = frozenset(
    {
        "train.keep_last",
        "train.log_every",
        "train.progress_bar",
        "train.report_to",
        "train.tensorboard",
        "health",
    }
)
"""Keys that may differ between a run and its resume: they change how a run reports, not what
it computes (the `health` thresholds only decide which alarms fire, and whether one stops the
run). Every other key is part of the run's identity. `train.tensorboard` is the switch that
`train.report_to` replaced: a run folder whose config.yaml still holds it resumes."""

Tracker = Literal["tensorboard", "wandb", "mlflow"]
"""An experiment tracker `train.report_to` can name (accelerate's tracker of that name)."""


class LoraConfig(StrictModel):
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


class ServedRolloutConfig(StrictModel):
    """Where a recipe's rollouts run: an in-process hf engine, or `beacon serve` processes
    (`beacon.train.core.setup`). GRPO's and OPD's `rollout:` sections both hold these."""

    concurrency: int = Field(32, ge=1, description="Episodes in flight in the agent loop.")
    servers: list[str] = Field(
        default_factory=list,
        description="Base URLs (ending in /v1) of `beacon serve` processes to roll out on, "
        "requests spread over them, new weights pushed to each after every step; empty: an "
        "in-process hf engine.",
    )
    server_model: str = Field("beacon", description="Served model name of the servers.")
    server_timeout_s: float = Field(300.0, gt=0, description="Per-request timeout on servers.")
    server_api_key_env: str | None = Field(
        None,
        description="Environment variable holding the servers' API key (`beacon serve "
        "--api-key`), sent with every request and weight push; None: no key.",
    )
    push_chunk_mb: int = Field(
        512,
        ge=1,
        description="Weight pushes to rollout.servers: MiB of tensors per request body (a "
        "larger tensor goes alone); the server applies a push once all its bodies arrived.",
    )
    _env_name = field_validator("server_api_key_env")(env_var_name)


class ModelConfig(StrictModel):
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


class TrainConfig(StrictModel):
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
    progress_bar: bool = Field(
        True,
        description="Show progress on the main process: a bar on a terminal, a log line every "
        "few seconds otherwise.",
    )
    report_to: list[Tracker] = Field(
        default_factory=list,
        description="Experiment trackers that also get every metrics.jsonl line (through "
        "accelerate): tensorboard (<output_dir>/tensorboard), wandb, mlflow.",
    )
    ddp_find_unused_parameters: bool = Field(
        True,
        description="DDP only: allow parameters without gradient in a step (the vision tower on "
        "a text-only micro-batch). Turn off for speed when every batch has images.",
    )

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.warmup_steps >= self.max_steps:
            raise ValueError(
                f"train.warmup_steps={self.warmup_steps} must be below "
                f"train.max_steps={self.max_steps}; lower --set train.warmup_steps"
            )
        return self


class HealthConfig(StrictModel):
    """When a health alarm fires (docs/train.md, "Guard rails"): one warning line per alarm as
    it starts firing, `health/alarm/<name>` in every step's metrics, and with `stop_on_alarm`
    a saved checkpoint and an error. Every threshold may be null: that alarm is off."""

    window: int = Field(
        5,
        ge=1,
        description="Steps in the rolling mean of the noisy metrics (tool rates, zero-variance "
        "groups, entropy, teacher-student gap); the log-prob gap and dropped share are per step.",
    )
    logprob_gap_max: float | None = Field(
        0.05,
        ge=0,
        description="health/sampler_logprob_gap above this (nats per generated token): the "
        "rollout engine does not sample from the trained weights, template or image positions.",
    )
    tool_rate_min: float | None = Field(
        0.02,
        ge=0,
        le=1,
        description="health/tool_rate (rolling) below this after it was at or above it: tool use "
        "collapsed.",
    )
    tool_rate_easy_max: float | None = Field(
        0.95,
        ge=0,
        le=1,
        description="health/tool_rate_easy (rolling) at or above this: tools on nearly every "
        "item the run labels easy (no adaptivity).",
    )
    zero_variance_max: float | None = Field(
        0.9,
        ge=0,
        le=1,
        description="health/zero_variance_groups (rolling) above this: almost no group has a "
        "reward difference, so almost nothing learns.",
    )
    entropy_min: float | None = Field(
        0.03,
        ge=0,
        description="health/entropy (rolling, nats) below this: the policy has collapsed onto "
        "single tokens and stops exploring.",
    )
    teacher_student_gap_growth: float | None = Field(
        1.3,
        gt=1,
        description="OPD: health/teacher_student_gap (rolling over teacher_student_gap_window) "
        "above this multiple of its first full window's mean: the student drifts away from its "
        "teacher.",
    )
    teacher_student_gap_window: int = Field(
        30,
        ge=1,
        description="OPD: steps in the teacher-student gap's rolling mean and in its baseline "
        "(the first full window). The per-step gap is a mean over few tokens, about as noisy as "
        "it is large: shorter windows fire on healthy runs.",
    )
    teacher_student_gap_floor: float = Field(
        0.01,
        ge=0,
        description="OPD: a rolling teacher-student gap at or below this (nats per token) is "
        "agreement, whatever its multiple (a teacher equal to the student gives ~1e-8).",
    )
    dropped_max: float | None = Field(
        0.0,
        ge=0,
        le=1,
        description="health/dropped_share above this: the step's trajectories failed the "
        "consistency checks (images, token ids) and were left out.",
    )
    stop_on_alarm: bool = Field(
        False,
        description="Stop the run when an alarm fires: the step's checkpoint is saved, then an "
        "error names the alarm; --resume continues (set this to false to train on).",
    )
