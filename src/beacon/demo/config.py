"""Settings of `beacon demo`: sizes of every stage, the full default and the `--quick` preset.

The full default runs the whole pipeline (measured time in docs/demo.md). `--quick` starts from
the cold-start checkpoint shipped in the package (`cold_start: shipped`, made by the full
demo's SFT stage) and runs accuracy-only against NAAR GRPO (36 steps), so the first minutes
show NAAR raising mode adaptiveness.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from beacon.config import StrictModel, flatten, to_dict


class DemoData(StrictModel):
    train_items: int = Field(4000, ge=4, description="synth_demo training items (tool mode)")
    hinted_items: int = Field(200, ge=0, description="hinted search items (teach hint use)")
    text_items: int = Field(2000, ge=0, description="easy items also solved text-only (notool)")
    tool_bias: float = Field(0.6, ge=0, le=1, description="expert's crop rate on easy items")
    marked_items: int = Field(
        800, ge=0, description="synth_keys `marked` items (a frame marks the cell)"
    )
    told_items: int = Field(
        600,
        ge=0,
        description="synth_keys `told` items, half red; a red key is noted, then mapped as a grey "
        "one (demo II's constructed weakness, docs/demo.md)",
    )
    keyed_hinted_items: int = Field(
        150,
        ge=0,
        description="synth_keys `keyed` items with the hint (teach following it; 300 made hinted "
        "groups all right, 0.98 per rollout, and so gradient-free: gate G-H4)",
    )
    hint_followed: float = Field(
        0.6,
        ge=0.0,
        le=1.0,
        description="share of the hinted keyed items on which the expert follows the hint (crops "
        "the key first); on the others it crops the target cell at once, so hinted groups split "
        "on the first crop (gate G-H4; at 1.0 the cold start followed the hint 0.99 of the time)",
    )
    keyed_unhinted_items: int = Field(
        30,
        ge=0,
        description="synth_keys `keyed` items without the hint (N_u: sets how often the cold "
        "start crops the key unhinted; the pilot: P 0.006 at 2% of keyed rows, 0.02-0.06 at 9%)",
    )
    train_seed: int = Field(1, description="seed of the training items")
    concurrency: int = Field(32, ge=1, description="expert episodes in flight")


class DemoSFT(StrictModel):
    steps: int = Field(1500, ge=1, description="SFT optimizer steps")
    batch_size: int = Field(32, ge=1, description="trajectories per step")
    lr: float = Field(2e-3, gt=0, description="peak learning rate (cosine to 10%)")
    warmup_steps: int = Field(100, ge=0, description="linear warm-up steps")


class DemoRL(StrictModel):
    arms: list[Literal["accuracy", "naar", "hgce", "hgce_uninformative", "naar_hgce"]] = Field(
        default_factory=lambda: ["accuracy", "naar", "hgce", "hgce_uninformative"],
        description="GRPO variants: accuracy-only reward, +NAAR, +HGCE, HGCE with an "
        "uninformative hint (its content control); naar_hgce (both) is also known",
    )
    steps: int = Field(
        24,
        ge=1,
        description="GRPO steps per arm and seed (24: HGCE's sampled key-first rate is mid "
        "take-off there; greedy `keyed` accuracy is saturated in every arm at 24 as at 36, "
        "docs/demo.md)",
    )
    prompts_per_step: int = Field(6, ge=1, description="items per GRPO step")
    group_size: int = Field(8, ge=2, description="rollouts per item (G)")
    lr: float = Field(
        3e-4, gt=0, description="constant learning rate (the study: 2e-4 slow, 5e-4 unstable)"
    )
    items: int = Field(
        240, ge=1, description="RL item pool (fresh items, seed 11; steps x prompts: each once)"
    )


class DemoReVuE(StrictModel):
    enabled: bool = Field(True, description="run the ReVuE stages")
    steps: int = Field(110, ge=1, description="OPD steps per variant and seed")
    warmup_steps: int = Field(12, ge=0, description="OPD linear warm-up steps (then constant)")
    items_per_step: int = Field(2, ge=1, description="items per OPD step")
    group_size: int = Field(4, ge=1, description="student rollouts per item (M)")
    lr: float = Field(
        5e-5,
        gt=0,
        description="student learning rate (2e-4 made the student surer of its readings faster "
        "than it made them right: docs/demo.md)",
    )
    student_sft_steps: int = Field(
        500,
        ge=1,
        description="SFT steps of the student's cold start (350 left it without the told "
        "layout: held-out plain-key told 0.04, docs/demo.md)",
    )
    teacher_steps: int = Field(
        300, ge=1, description="SFT steps teaching the teacher to read reflections"
    )
    teacher_lr: float = Field(5e-4, gt=0, description="learning rate of that SFT")
    told_pool: int = Field(
        400,
        ge=2,
        description="synth_keys_told items (half red) the expert solves for the teacher's told "
        "rows (plain, reflection-conditioned, wrong-path: beacon.demo.told_rows)",
    )
    position: Literal["end", "before_question"] = Field(
        "before_question",
        description="where the teacher reads the reflection: before the question keeps the "
        "question next to the answer, so the coordinates a crop copies stay where they were",
    )
    teacher_check: Literal["error", "warn"] = Field(
        "error",
        description="a teacher no better than the student on its own rollouts (OPD's teacher "
        "check): refuse the run (the report says why), or warn and distil anyway",
    )
    context_check: Literal["error", "warn"] = Field(
        "error",
        description="a reflection that lowers the teacher's log-prob of correct continuations: "
        "refuse the reflection variants, or warn and distil anyway",
    )
    check_items: int = Field(8, ge=1, description="items the teacher check probes")
    variants: list[Literal["vanilla", "revue", "shuffled", "reflection", "control"]] = Field(
        default_factory=lambda: ["vanilla", "revue", "shuffled", "control"],
        description="OPD variants: vanilla, ReVuE, ReVuE with shuffled reflections (its content "
        "control), the control (the student its own teacher; seed 0 only); reflection "
        "(reflection without reweighting) is also known",
    )
    probe_items: int = Field(
        24, ge=1, description="told items of the teacher's decisive-token probe (premises)"
    )


class DemoEval(StrictModel):
    items: int = Field(120, ge=4, description="held-out synth_demo items (seed 2), both modes")
    keyed_items: int = Field(180, ge=4, description="held-out synth_keys keyed items (HGCE)")
    marked_items: int = Field(120, ge=4, description="held-out synth_keys marked items")
    told_items: int = Field(180, ge=4, description="held-out synth_keys told items (ReVuE)")
    batch_size: int = Field(32, ge=1, description="hf engine batch")
    bootstrap: int = Field(1000, ge=0, description="bootstrap resamples for CIs")


class DemoConfig(StrictModel):
    """`beacon demo`: every stage's size; `--quick` swaps in `QUICK`."""

    out: str = Field("runs/demo", description="demo folder; rerunning into it resumes")
    cold_start: Literal["train", "shipped"] = Field(
        "train",
        description="train: build the model, the expert data and the cold-start SFT; shipped: "
        "start from the full demo's cold-start checkpoint shipped in the package "
        "(beacon.demo.assets), without those stages",
    )
    seeds: int = Field(3, ge=1, description="RL seeds per arm")
    threads: int = Field(2, ge=1, description="torch threads (the study ran with 2)")
    jobs: int = Field(
        2,
        ge=1,
        description="GRPO runs, OPD variants (each with its evaluation) and the ReVuE teacher's "
        "and student's SFT trained at once, each in a process of its own with threads/jobs "
        "torch threads (beacon.demo.run)",
    )
    progress: bool = Field(True, description="progress bars (operational: not part of a result)")
    data: DemoData = Field(default_factory=DemoData)
    sft: DemoSFT = Field(default_factory=DemoSFT)
    rl: DemoRL = Field(default_factory=DemoRL)
    revue: DemoReVuE = Field(default_factory=DemoReVuE)
    eval: DemoEval = Field(default_factory=DemoEval)

    @model_validator(mode="after")
    def _check(self) -> DemoConfig:
        if self.cold_start == "shipped" and self.revue.enabled:
            raise ValueError(
                "cold_start=shipped has no expert data for the ReVuE teacher and student; set "
                "revue.enabled=false, or cold_start=train to run the whole pipeline"
            )
        return self


QUICK: dict[str, Any] = {
    "cold_start": "shipped",
    "seeds": 1,
    "rl": {"arms": ["accuracy", "naar"], "steps": 36},
    "revue": {"enabled": False},
}
"""From the shipped cold start: accuracy-only vs NAAR GRPO, 36 steps each (the size its
documented figure was measured at; the full demo's GRPO stops earlier for HGCE's end point), one
seed each, evaluated on the full held-out set with intervals (a few minutes on 2 cores)."""

COLD_START_KEYS = ("threads", "data", "sft")
"""The settings the cold-start checkpoint depends on (with the demo model's fixed seed): a
shipped checkpoint records them, and `cold_start: shipped` is the full demo's only while they
match."""

OPERATIONAL_KEYS = (
    "out",
    "progress",
    "threads",
    "seeds",
    "rl.arms",
    "jobs",
    "revue.enabled",
    "revue.variants",
)
"""Settings that add, drop or run stages differently without changing any finished result."""


def cold_start_identity(cfg: DemoConfig) -> dict[str, Any]:
    """The `COLD_START_KEYS` settings of `cfg`, flat (`data.concurrency` left out: it changes
    how fast the expert runs, not its trajectories)."""
    flat = flatten(to_dict(cfg))
    keep = {
        key: value
        for key, value in flat.items()
        if key.split(".")[0] in COLD_START_KEYS and key != "data.concurrency"
    }
    return dict(sorted(keep.items()))


def quick_overrides() -> list[str]:
    """`QUICK` as `--set` lines, so user overrides given after them win."""
    return [f"{key}={value}" for key, value in flatten(QUICK).items()]
