"""Settings of `beacon demo`: sizes of every stage, the full default and the `--quick` preset.

The full default takes 26-32 minutes on 2 CPU cores (measured figures in
docs/demo.md); `--quick` runs every stage at toy size in a few minutes and shows only that the
pipeline runs end to end, not the effects.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DemoData(_Strict):
    train_items: int = Field(4000, ge=4, description="synth_demo training items (tool mode)")
    hinted_items: int = Field(200, ge=0, description="hinted search items (teach hint use)")
    text_items: int = Field(2000, ge=0, description="easy items also solved text-only (notool)")
    tool_bias: float = Field(0.6, ge=0, le=1, description="expert's crop rate on easy items")
    train_seed: int = Field(1, description="seed of the training items")
    concurrency: int = Field(32, ge=1, description="expert episodes in flight")


class DemoSFT(_Strict):
    steps: int = Field(2400, ge=1, description="SFT optimizer steps")
    batch_size: int = Field(32, ge=1, description="trajectories per step")
    lr: float = Field(2e-3, gt=0, description="peak learning rate (cosine to 10%)")
    warmup_steps: int = Field(100, ge=0, description="linear warm-up steps")


class DemoRL(_Strict):
    arms: list[str] = Field(
        default_factory=lambda: ["accuracy", "naar", "hgce", "naar_hgce"],
        description="GRPO variants: accuracy-only reward, +NAAR, +HGCE, +both",
    )
    steps: int = Field(40, ge=1, description="GRPO steps per arm and seed")
    prompts_per_step: int = Field(6, ge=1, description="items per GRPO step")
    group_size: int = Field(8, ge=2, description="rollouts per item (G)")
    lr: float = Field(
        3e-4, gt=0, description="constant learning rate (the study: 2e-4 slow, 5e-4 unstable)"
    )
    items: int = Field(
        240, ge=1, description="RL item pool (fresh items, seed 11; steps x prompts: each once)"
    )


class DemoReVuE(_Strict):
    enabled: bool = Field(True, description="run the ReVuE stage")
    steps: int = Field(30, ge=1, description="OPD steps per variant")
    items_per_step: int = Field(4, ge=1, description="items per OPD step")
    group_size: int = Field(4, ge=1, description="student rollouts per item")
    lr: float = Field(2e-4, gt=0, description="student learning rate")
    student_sft_steps: int = Field(500, ge=1, description="SFT steps of the student's cold start")
    teacher_steps: int = Field(
        100, ge=1, description="SFT steps teaching the teacher to read reflections"
    )
    teacher_lr: float = Field(5e-4, gt=0, description="learning rate of that SFT")
    teacher_check: Literal["error", "warn"] = Field(
        "error",
        description="a teacher no better than the student on its own rollouts (OPD's teacher "
        "check): stop the OPD stage, or warn and distil anyway",
    )


class DemoEval(_Strict):
    items: int = Field(120, ge=4, description="held-out items (seed 2), both modes")
    batch_size: int = Field(32, ge=1, description="hf engine batch")
    bootstrap: int = Field(1000, ge=0, description="bootstrap resamples for CIs")


class DemoConfig(_Strict):
    """`beacon demo`: every stage's size; `--quick` swaps in `QUICK`."""

    out: str = Field("runs/demo", description="demo folder; rerunning into it resumes")
    seeds: int = Field(3, ge=1, description="RL seeds per arm")
    threads: int = Field(2, ge=1, description="torch threads (the study ran with 2)")
    jobs: int = Field(
        2,
        ge=1,
        description="GRPO runs and OPD variants (each with its evaluation) trained at once, "
        "each in a process of its own with threads/jobs torch threads (beacon.demo.schedule)",
    )
    progress: bool = Field(True, description="progress bars (operational: not part of a result)")
    data: DemoData = Field(default_factory=DemoData)
    sft: DemoSFT = Field(default_factory=DemoSFT)
    rl: DemoRL = Field(default_factory=DemoRL)
    revue: DemoReVuE = Field(default_factory=DemoReVuE)
    eval: DemoEval = Field(default_factory=DemoEval)


QUICK: dict[str, Any] = {
    "seeds": 1,
    "jobs": 1,  # starting the pool's processes takes longer than toy runs side by side gain
    "data": {"train_items": 48, "hinted_items": 8, "text_items": 16, "concurrency": 16},
    "sft": {"steps": 30, "batch_size": 16, "warmup_steps": 5},
    "rl": {"steps": 2, "prompts_per_step": 2, "group_size": 4, "items": 16},
    "revue": {
        "steps": 2,
        "items_per_step": 2,
        "group_size": 2,
        "student_sft_steps": 10,
        "teacher_steps": 4,
        "teacher_check": "warn",  # a 30-step teacher knows next to nothing
    },
    "eval": {"items": 16, "bootstrap": 100},
}
"""Toy sizes: every stage runs (about a minute on 2 cores); the numbers mean nothing."""

OPERATIONAL_KEYS = ("out", "progress", "threads", "seeds", "rl.arms", "jobs", "revue.enabled")
"""Settings that add, drop or run stages differently without changing any finished result."""


def quick_overrides() -> list[str]:
    """`QUICK` as `--set` lines, so user overrides given after them win."""
    from beacon.config import flatten

    return [f"{key}={value}" for key, value in flatten(QUICK).items()]
