"""The stages of `beacon demo`, each a real Beacon code path, each resumable on its own.

Order (folders under the demo's `out`):

1. `model/`: the demo model, random init (`beacon.demo.model`).
2. `expert-tool/`, `expert-text/`, `sft/`: the cold-start SFT set (`beacon.demo.data`).
3. `sft-run/`: `run_sft` on it: the tool-biased cold start.
4. `rl/ARM-sSEED/`: `run_grpo` from the SFT checkpoint, one run per RL arm and seed.
5. `teacher-sft/`: the best RL run learns to read reflections (`beacon.demo.teacher`).
6. `student-sft/`, `opd/VARIANT/`: a fresh student (other init seed, a short SFT), distilled from
   that teacher by each of `OPD_VARIANTS` (`run_opd`, scripted critic).
7. `eval/NAME/`: `run_eval` of every trained model on the held-out items, tool and notool mode.
8. `report.md` (`beacon.demo.report`).

Resuming: a finished stage (final checkpoint, or eval summary, present) is skipped and keeps
its recorded time; an unfinished training stage resumes from its newest checkpoint and an
unfinished eval from its records. So rerunning `beacon demo` after a `kill -9` loses at most one
checkpoint interval of one stage.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from beacon.agent.config import AgentConfig
from beacon.demo.config import DemoConfig
from beacon.demo.data import TRAIN_BENCH, build_sft_data, expert_agent
from beacon.demo.model import make_demo_model
from beacon.demo.teacher import TEACHER_DATA

logger = logging.getLogger(__name__)

RL_ARMS = {
    "accuracy": ("binary", False),
    "naar": ("naar", False),
    "hgce": ("binary", True),
    "naar_hgce": ("naar", True),
}
"""Arm name -> (rl.reward, rl.hgce.enabled): the paper's ablation table in miniature."""

OPD_VARIANTS = {
    "vanilla": ("base", "uniform"),
    "reflection": ("reflection", "uniform"),
    "revue": ("reflection", "revue"),
}
"""OPD variant -> (teacher.context, revue.weighting) (docs/train.md, "OPD"): vanilla OPD, the
paper's "reflection without reweighting" ablation, and ReVuE; the middle one separates what the
reflection-conditioned teacher does from what the token weights do."""

RL_BENCH = "synth_demo_rl"
"""RL items: large, tiny, large, search (`beacon.benchmarks.synth_demo.RL_MIX`)."""
EVAL_SEED = 2
RL_SEED = 11
STUDENT_INIT_SEED = 1


@dataclass(frozen=True)
class Stage:
    """One step of the demo; `run` does nothing when `done()` (its output is complete)."""

    name: str
    run: Callable[[], None]
    done: Callable[[], bool]
    job: str | None = None
    """The run this stage trains or evaluates (a GRPO run, an OPD variant): a job's stages run
    in order, in one process, beside other jobs' (`beacon.demo.schedule`)."""


def final_checkpoint(run_dir: Path, steps: int) -> Path:
    return run_dir / f"checkpoint-{steps}"


def is_complete(run_dir: Path, steps: int) -> bool:
    return (final_checkpoint(run_dir, steps) / "COMPLETE").exists()


def _train_config(cfg: DemoConfig, out: Path, seed: int, steps: int, lr: float, **extra) -> dict:
    settings = {
        "output_dir": str(out),
        "seed": seed,
        "max_steps": steps,
        "lr": lr,
        "max_grad_norm": 1.0,
        "save_every": max(1, steps // 4),
        "keep_last": 1,
        "log_every": 1,
        "progress_bar": cfg.progress,
        "tensorboard": False,
    }
    return {**settings, **extra}


def greedy_agent() -> AgentConfig:
    """The held-out evaluation's agent: greedy, one crop at most, the expert's limits."""
    return expert_agent()


def sampling_agent() -> AgentConfig:
    """RL and OPD rollouts: temperature 1, code greedy (the study's setting)."""
    agent = expert_agent()
    return agent.model_copy(update={"temperature": 1.0, "max_total_new_tokens": 96})


class DemoStages:
    """Paths and stage functions of one demo folder."""

    def __init__(self, cfg: DemoConfig) -> None:
        self.cfg = cfg
        self.root = Path(cfg.out)
        self.model_dir = self.root / "model"
        self.sft_dir = self.root / "sft-run"
        self.student_dir = self.root / "student-sft"
        self.teacher_dir = self.root / "teacher-sft"

    # -- paths ---------------------------------------------------------------------------------
    def sft_model(self) -> Path:
        return final_checkpoint(self.sft_dir, self.cfg.sft.steps)

    def rl_dir(self, arm: str, seed: int) -> Path:
        return self.root / "rl" / f"{arm}-s{seed}"

    def rl_model(self, arm: str, seed: int) -> Path:
        return final_checkpoint(self.rl_dir(arm, seed), self.cfg.rl.steps)

    def teacher_model(self) -> Path:
        return final_checkpoint(self.teacher_dir, self.cfg.revue.teacher_steps)

    def student_model(self) -> Path:
        return final_checkpoint(self.student_dir, self.cfg.revue.student_sft_steps)

    def opd_dir(self, variant: str) -> Path:
        return self.root / "opd" / variant

    def opd_model(self, variant: str) -> Path:
        return final_checkpoint(self.opd_dir(variant), self.cfg.revue.steps)

    def eval_dir(self, name: str) -> Path:
        return self.root / "eval" / name

    def rl_runs(self) -> list[tuple[str, int]]:
        """Seed-major: every arm of seed 0 first, so a stopped demo still has a full comparison."""
        return [(arm, seed) for seed in range(self.cfg.seeds) for arm in self.cfg.rl.arms]

    # -- stages --------------------------------------------------------------------------------
    def stages(self) -> list[Stage]:
        """Every stage in order; names are what progress lines print."""
        c = self.cfg
        out = [
            Stage("build the demo model", self.build_model, self.model_dir_done),
            Stage("scripted expert -> SFT data", self.build_data, self.data_done),
            Stage(
                "cold-start SFT",
                lambda: self.sft(self.sft_dir, self.model_dir, c.sft.steps),
                lambda: is_complete(self.sft_dir, c.sft.steps),
            ),
            self.eval_stage("evaluate the SFT model", "sft", self.sft_model),
        ]
        for arm, seed in self.rl_runs():
            name = f"{arm}-s{seed}"
            out.append(
                Stage(
                    f"GRPO {name}",
                    lambda a=arm, s=seed: self.grpo(a, s),
                    lambda a=arm, s=seed: is_complete(self.rl_dir(a, s), c.rl.steps),
                    job=f"GRPO {name}",
                )
            )
            out.append(
                self.eval_stage(
                    f"evaluate {name}",
                    name,
                    lambda a=arm, s=seed: self.rl_model(a, s),
                    job=f"GRPO {name}",
                )
            )
        if c.revue.enabled:
            out.append(
                Stage(
                    "teacher learns to read reflections (SFT)",
                    self.teacher_sft,
                    lambda: is_complete(self.teacher_dir, c.revue.teacher_steps),
                )
            )
            out.append(self.eval_stage("evaluate the teacher", "teacher", self.teacher_model))
            out.append(
                Stage(
                    "student cold start (SFT)",
                    self.student_sft,
                    lambda: is_complete(self.student_dir, c.revue.student_sft_steps),
                )
            )
            out.append(self.eval_stage("evaluate the student", "student", self.student_model))
            for variant in OPD_VARIANTS:
                out.append(
                    Stage(
                        f"OPD {variant}",
                        lambda v=variant: self.opd(v),
                        lambda v=variant: is_complete(self.opd_dir(v), c.revue.steps),
                        job=f"OPD {variant}",
                    )
                )
                out.append(
                    self.eval_stage(
                        f"evaluate OPD {variant}",
                        f"opd-{variant}",
                        lambda v=variant: self.opd_model(v),
                        job=f"OPD {variant}",
                    )
                )
        return out

    def eval_stage(
        self,
        title: str,
        name: str,
        model: Callable[[], Path],
        job: str | None = None,
    ) -> Stage:
        return Stage(
            title,
            lambda: self.evaluate(name, model()),
            lambda: (self.eval_dir(name) / "summary.json").exists(),
            job,
        )

    def model_dir_done(self) -> bool:
        return (self.model_dir / "beacon_demo.json").exists()

    def data_done(self) -> bool:
        return all((self.root / d / "summary.json").exists() for d in ("sft", TEACHER_DATA))

    def build_model(self) -> None:
        if not self.model_dir_done():
            make_demo_model(self.model_dir, seed=0)

    def build_data(self) -> None:
        if not self.data_done():
            build_sft_data(self.cfg, self.root, self.cfg.progress)

    def sft(
        self,
        run_dir: Path,
        model: Path,
        steps: int,
        data: str = "sft",
        lr: float | None = None,
        warmup_steps: int | None = None,
    ) -> None:
        """SFT of `model` on `data`'s trajectories (images always in `sft/images`)."""
        from beacon.train.sft import SFTConfig, run_sft

        if is_complete(run_dir, steps):
            return
        s = self.cfg.sft
        sft_data = self.root / "sft"
        warmup = s.warmup_steps if warmup_steps is None else warmup_steps
        train = _train_config(
            self.cfg,
            run_dir,
            seed=0,
            steps=steps,
            lr=s.lr if lr is None else lr,
            global_batch_size=s.batch_size,
            warmup_steps=min(warmup, steps - 1),
            weight_decay=0.01,
            betas=(0.9, 0.98),
            log_every=max(1, steps // 100),
        )
        cfg = SFTConfig.model_validate(
            {
                "model": {"path": str(model)},
                "data": {
                    "train": [str(self.root / data / "trajectories.jsonl")],
                    "images": str(sft_data / "images"),
                    "max_length": 1024,
                },
                "train": train,
            }
        )
        run_sft(cfg, resume=(run_dir / "config.yaml").exists())

    def student_sft(self) -> None:
        student_init = self.root / "student-init"
        if not (student_init / "beacon_demo.json").exists():
            make_demo_model(student_init, seed=STUDENT_INIT_SEED)
        self.sft(self.student_dir, student_init, self.cfg.revue.student_sft_steps)

    def grpo(self, arm: str, seed: int) -> None:
        from beacon.train.grpo import GRPOConfig, run_grpo

        run_dir = self.rl_dir(arm, seed)
        r = self.cfg.rl
        if is_complete(run_dir, r.steps):
            return
        reward, hgce = RL_ARMS[arm]
        rollouts = r.prompts_per_step * r.group_size
        cfg = GRPOConfig.model_validate(
            {
                "model": {"path": str(self.sft_model())},
                "train": _train_config(
                    self.cfg, run_dir, seed, r.steps, r.lr, min_lr_ratio=1.0, betas=(0.9, 0.99)
                ),
                "rollout": {
                    "benchmark": RL_BENCH,
                    "limit": r.items,
                    "data_seed": RL_SEED,
                    "prompts_per_step": r.prompts_per_step,
                    "group_size": r.group_size,
                    "concurrency": rollouts,
                    "engine_batch_size": rollouts,
                },
                "agent": sampling_agent().model_dump(),
                "rl": {"reward": reward, "hgce": {"enabled": hgce}},
            }
        )
        run_grpo(cfg, resume=(run_dir / "config.yaml").exists())

    def teacher_sft(self) -> None:
        """The teacher learns the reflection-conditioned prompts it will score with."""
        v = self.cfg.revue
        self.sft(
            self.teacher_dir,
            self.teacher_source(),
            v.teacher_steps,
            data=TEACHER_DATA,
            lr=v.teacher_lr,
            warmup_steps=v.teacher_steps // 10,
        )

    def teacher_source(self) -> Path:
        """What the ReVuE teacher starts from: the RL run with the best held-out tool-mode
        accuracy (chosen once, recorded in `opd/teacher.json`, so a resumed demo keeps it)."""
        record = self.root / "opd" / "teacher.json"
        if record.exists():
            return Path(json.loads(record.read_text())["teacher"])

        def tool_accuracy(run: tuple[str, int]) -> float:
            summary = json.loads(
                (self.eval_dir(f"{run[0]}-s{run[1]}") / "summary.json").read_text()
            )
            return summary["overall"]["modes"]["tool"]["accuracy"] or 0.0

        best = max(self.rl_runs(), key=tool_accuracy)
        record.parent.mkdir(parents=True, exist_ok=True)
        chosen = {"teacher": str(self.rl_model(*best)), "tool_accuracy": tool_accuracy(best)}
        record.write_text(json.dumps(chosen, indent=2) + "\n")
        return self.rl_model(*best)

    def opd(self, variant: str) -> None:
        from beacon.train.opd import OPDConfig, run_opd

        run_dir = self.opd_dir(variant)
        v = self.cfg.revue
        if is_complete(run_dir, v.steps):
            return
        context, weighting = OPD_VARIANTS[variant]
        cfg = OPDConfig.model_validate(
            {
                "model": {"path": str(self.student_model())},
                "teacher": {"path": str(self.teacher_model()), "context": context},
                "teacher_check": {"on_fail": v.teacher_check},
                "data": {"benchmark": TRAIN_BENCH, "limit": self.cfg.rl.items, "seed": RL_SEED},
                "rollout": {
                    "group_size": v.group_size,
                    "items_per_step": v.items_per_step,
                    "agent": sampling_agent().model_dump(),
                    "batch_size": v.group_size * v.items_per_step,
                },
                "revue": {"weighting": weighting, "critic_timeout_s": 60.0, "critic_retries": 1},
                "train": _train_config(self.cfg, run_dir, 0, v.steps, v.lr, min_lr_ratio=1.0),
            }
        )
        run_opd(cfg, resume=(run_dir / "config.yaml").exists())

    def evaluate(self, name: str, model: Path) -> None:
        from beacon.engines.config import EngineConfig
        from beacon.eval.config import EvalConfig
        from beacon.eval.runner import run_eval

        e = self.cfg.eval
        cfg = EvalConfig(
            engine=EngineConfig(name="hf", model=str(model), device="cpu", batch_size=e.batch_size),
            agent=greedy_agent(),
            benchmarks=[TRAIN_BENCH],
            limit=e.items,
            modes=["tool", "notool"],
            concurrency=e.batch_size,
            seed=EVAL_SEED,
            out=str(self.eval_dir(name)),
            bootstrap=0,
            report=False,
        )
        run_eval(cfg, progress=self.cfg.progress)
