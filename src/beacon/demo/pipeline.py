"""The stages of `beacon demo`, each a real Beacon code path, each resumable on its own.

Order (folders under the demo's `out`):

1. `model/`: the demo model, random init (`beacon.demo.model`).
2. `expert-*/`, `sft/`: the cold-start SFT set (`beacon.demo.data`): `synth_demo` and
   `synth_keys` rows.
3. `sft-run/`: `run_sft` on it: the tool-biased cold start.
4. `gates/keyed*/`, `gates/hgce.json`: HGCE's premises on the cold start, before any arm
   (`beacon.demo.premises`; judged by `beacon.demo.gates`).
5. `rl/ARM-sSEED/`: `run_grpo` from the SFT checkpoint on `synth_keys_rl`, one run per RL arm
   and seed (`RL_ARMS`: accuracy-only, NAAR, HGCE, HGCE with an uninformative hint).
6. `teacher-told/`, `teacher-sft/`: the best RL run learns to read reflections
   (`beacon.demo.teacher_data` one-hop rows, `beacon.demo.told_rows` `told` rows).
7. `student-sft/`, `gates/revue-probe/`, `gates/revue.json`, `opd/VARIANT-sSEED/`: a fresh
   student (other init seed, a short SFT); ReVuE's premises (the teacher's decisive-token probe
   and grounding gate on the student's `told` rollouts); the student distilled from that
   teacher by each OPD variant (`OPD_VARIANTS`, `run_opd`, scripted critic) on `synth_keys_opd`.
8. `eval/NAME/`: `run_eval` of every trained model: `synth_demo` held-out items (tool and notool
   mode), and `synth_keys` sets where a claim needs them (`keys-`, `keyed-sampled-`, `told-`).
9. `report.md` (`beacon.demo.report`).

With `cold_start: shipped` (`--quick`), stages 1-3 are replaced by the cold-start checkpoint
shipped in the package (`shipped_cold_start`), made by a full demo's stage 3 (`beacon demo
--export-cold-start`); stages 5-6 need stage 2's data and do not run.

Resuming: a finished stage (final checkpoint, or eval summary, present) is skipped and keeps
its recorded time; an unfinished training stage resumes from its newest checkpoint and an
unfinished eval from its records. So rerunning `beacon demo` after a `kill -9` loses at most one
checkpoint interval of one stage.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from beacon.agent.config import AgentConfig
from beacon.benchmarks.synth_demo import SynthDemo
from beacon.benchmarks.synth_keys import (
    KEYED_HINTED,
    SynthKeysKeyed,
    SynthKeysMarked,
    SynthKeysOPD,
    SynthKeysRL,
    SynthKeysTold,
    uninformative_hint_rows,
)
from beacon.data.records import SFT_FILE
from beacon.demo.config import DemoConfig
from beacon.demo.data import EXPERT_TOLD, TRAIN_BENCH, build_sft_data, expert_agent, told_pool
from beacon.demo.expert import keys_agent
from beacon.demo.model import DEMO_MODEL_FILE, make_demo_model
from beacon.demo.premises import (
    HGCE_FILE,
    REVUE_FILE,
    hgce_premises,
    measure_teacher_probe,
    write_record,
)
from beacon.demo.teacher_data import TEACHER_DATA, build_teacher_set
from beacon.demo.told_rows import TOLD_DATA, ToldPlan, build_told_rows
from beacon.engines.config import EngineConfig
from beacon.errors import UserError
from beacon.eval.config import EvalConfig
from beacon.eval.runner import run_eval
from beacon.jsonl import read_jsonl, write_atomic, write_jsonl_atomic
from beacon.runfolder import has_run, read_summary
from beacon.stages import Stage
from beacon.train.core.checkpoint import COMPLETE
from beacon.train.grpo import GRPOConfig, run_grpo
from beacon.train.grpo.recipe import HGCE_LOG
from beacon.train.opd import OPDConfig, run_opd
from beacon.train.sft import SFTConfig, run_sft

logger = logging.getLogger(__name__)

RL_ARMS = {
    "accuracy": ("binary", False),
    "naar": ("naar", False),
    "hgce": ("binary", True),
    "hgce_uninformative": ("binary", True),
    "naar_hgce": ("naar", True),
}
"""Arm name -> (rl.reward, rl.hgce.enabled): the paper's ablation table in miniature, and HGCE's
content control: the same machinery with an answer-free hint that names no procedure
(`synth_keys.UNINFORMATIVE_HINT`, served from a hint cache)."""
UNINFORMATIVE = "hgce_uninformative"
HINTS_FILE = "hints-uninformative.jsonl"
"""In `rl/`: the uninformative arm's hint cache (`rollout.hints`), one row per RL item."""

OPD_VARIANTS = {
    "vanilla": ("base", "uniform", "own"),
    "revue": ("reflection", "revue", "own"),
    "shuffled": ("reflection", "revue", "shuffled"),
    "reflection": ("reflection", "uniform", "own"),
    "control": ("base", "uniform", "own"),
}
"""OPD variant -> (teacher.context, revue.weighting, revue.reflection_source) (docs/train.md,
"OPD"): vanilla OPD; ReVuE; its content control, each rollout conditioned on another item's
reflection (same format, wrong content); the paper's "reflection without reweighting" ablation
(optional: its difference from ReVuE is not resolvable at the demo's size); and the control,
vanilla OPD with the student as its own teacher, a run without learning signal that must leave
the student where it was."""
CONTROL = "control"
REFUSED = "refused.txt"
"""In an OPD run folder: the teacher check's refusal, which ends that run (the report says why)."""

RL_BENCH = SynthKeysRL.name
"""RL items: large, tiny, large, keyed, marked, keyed (`beacon.benchmarks.synth_keys.RL_MIX`)."""
OPD_BENCH = SynthKeysOPD.name
"""OPD items: `told` (half red) alternating with one-hop `synth_demo_rl` items."""
KEYED, MARKED, TOLD = SynthKeysKeyed.name, SynthKeysMarked.name, SynthKeysTold.name
EVAL_SEED = 2
RL_SEED = 11
STUDENT_INIT_SEED = 1
COLD_START_DIR = "cold_start"
COLD_START_RECORD = "cold_start.json"
"""In a shipped cold start: the settings it was made with (`config.cold_start_identity`)."""


def shipped_cold_start() -> Path:
    """The cold-start checkpoint shipped in the package (`src/beacon/demo/assets/cold_start`)."""
    from importlib.resources import files

    return Path(str(files("beacon.demo") / "assets" / COLD_START_DIR))


def final_checkpoint(run_dir: Path, steps: int) -> Path:
    return run_dir / f"checkpoint-{steps}"


def is_complete(run_dir: Path, steps: int) -> bool:
    return (final_checkpoint(run_dir, steps) / COMPLETE).exists()


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
    }
    return {**settings, **extra}


def greedy_agent() -> AgentConfig:
    """The held-out evaluation's agent: greedy, one crop at most, the expert's limits."""
    return expert_agent()


def sampling_agent() -> AgentConfig:
    """RL rollouts: temperature 1 for every token (the feasibility study's setting), two crops
    at most (a `synth_keys` item's key, then its cell)."""
    return keys_agent().model_copy(update={"temperature": 1.0, "max_total_new_tokens": 128})


def opd_agent() -> AgentConfig:
    """OPD rollouts as the ReVuE paper samples them: text at temperature 1 with top-p 0.9 and
    top-k 50, code at temperature 0."""
    return sampling_agent().model_copy(update={"code_temperature": 0.0, "top_p": 0.9, "top_k": 50})


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
        if self.cfg.cold_start == "shipped":
            return shipped_cold_start()
        return final_checkpoint(self.sft_dir, self.cfg.sft.steps)

    def rl_dir(self, arm: str, seed: int) -> Path:
        return self.root / "rl" / f"{arm}-s{seed}"

    def rl_model(self, arm: str, seed: int) -> Path:
        return final_checkpoint(self.rl_dir(arm, seed), self.cfg.rl.steps)

    def teacher_model(self) -> Path:
        return final_checkpoint(self.teacher_dir, self.cfg.revue.teacher_steps)

    def student_model(self) -> Path:
        return final_checkpoint(self.student_dir, self.cfg.revue.student_sft_steps)

    def opd_dir(self, variant: str, seed: int) -> Path:
        return self.root / "opd" / f"{variant}-s{seed}"

    def opd_model(self, variant: str, seed: int) -> Path:
        return final_checkpoint(self.opd_dir(variant, seed), self.cfg.revue.steps)

    def opd_done(self, variant: str, seed: int) -> bool:
        run = self.opd_dir(variant, seed)
        return is_complete(run, self.cfg.revue.steps) or (run / REFUSED).exists()

    def opd_runs(self) -> list[tuple[str, int]]:
        """Seed-major, as the RL runs; the control once (every one of its steps is skipped:
        more seeds would measure nothing)."""
        variants = self.cfg.revue.variants
        return [
            (variant, seed)
            for seed in range(self.cfg.seeds)
            for variant in variants
            if variant != CONTROL or seed == 0
        ]

    def eval_dir(self, name: str) -> Path:
        return self.root / "eval" / name

    def rl_runs(self) -> list[tuple[str, int]]:
        """Seed-major: every arm of seed 0 first, so a stopped demo still has a full comparison."""
        return [(arm, seed) for seed in range(self.cfg.seeds) for arm in self.cfg.rl.arms]

    def tests_hgce(self) -> bool:
        """HGCE is compared (with its premises and `synth_keys` evaluations): an HGCE arm and
        the accuracy-only arm both run."""
        arms = self.cfg.rl.arms
        return "accuracy" in arms and any(RL_ARMS[a][1] for a in arms)

    def gates_dir(self) -> Path:
        return self.root / "gates"

    # -- stages --------------------------------------------------------------------------------
    def stages(self) -> list[Stage]:
        """Every stage in order; names are what progress lines print."""
        c = self.cfg
        out = [] if c.cold_start == "shipped" else self.cold_start_stages()
        out.append(self.eval_stage("evaluate the SFT model", "sft", self.sft_model))
        if self.tests_hgce():
            keys = self.keys_stage("evaluate the SFT model on synth_keys", "sft", self.sft_model)
            out.append(keys)
            out.append(
                Stage(
                    "HGCE premises on the cold start (G-H1..G-H4)",
                    self.hgce_premises,
                    lambda: (self.gates_dir() / HGCE_FILE).exists(),
                )
            )
        for arm, seed in self.rl_runs():
            out += self.grpo_stages(arm, seed)
        if self.tests_hgce():
            out.append(Stage("hint reliance of HGCE", self.hint_reliance, self.hint_reliance_done))
        if c.revue.enabled:
            out += self.revue_stages()
        return out

    def grpo_stages(self, arm: str, seed: int) -> list[Stage]:
        """One GRPO run and its evaluations (one job): `synth_demo`, and with HGCE compared
        the `synth_keys` sets, greedy and (`keyed`) sampled, for the arms the comparison reads
        (accuracy-only and the hinted arms)."""
        name, job = f"{arm}-s{seed}", f"GRPO {arm}-s{seed}"
        model = functools.partial(self.rl_model, arm, seed)
        out = [
            Stage(
                job,
                lambda a=arm, s=seed: self.grpo(a, s),
                lambda a=arm, s=seed: is_complete(self.rl_dir(a, s), self.cfg.rl.steps),
                job=job,
            ),
            self.eval_stage(f"evaluate {name}", name, model, job=job),
        ]
        if self.tests_hgce() and (arm == "accuracy" or RL_ARMS[arm][1]):
            out.append(self.keys_stage(f"evaluate {name} on synth_keys", name, model, job=job))
            out.append(
                self.eval_run_stage(
                    f"evaluate {name} on keyed items, sampled",
                    f"keyed-sampled-{name}",
                    lambda: self.keyed_sampled(name, model()),
                    job,
                )
            )
        return out

    def revue_stages(self) -> list[Stage]:
        """Teacher, student, ReVuE's premises, then every OPD run and its evaluations."""
        c = self.cfg
        teacher, student = "ReVuE teacher", "ReVuE student"
        out = [
            Stage(
                "teacher learns to read reflections (SFT)",
                self.teacher_sft,
                lambda: is_complete(self.teacher_dir, c.revue.teacher_steps),
                job=teacher,
                waits=True,  # it starts from the best GRPO run
            ),
            self.eval_stage("evaluate the teacher", "teacher", self.teacher_model, teacher),
            self.told_stage(
                "evaluate the teacher on told items", "teacher", self.teacher_model, teacher
            ),
            Stage(
                "student cold start (SFT)",
                self.student_sft,
                lambda: is_complete(self.student_dir, c.revue.student_sft_steps),
                job=student,
            ),
            self.eval_stage("evaluate the student", "student", self.student_model, student),
            self.told_stage(
                "evaluate the student on told items", "student", self.student_model, student
            ),
            Stage(
                "ReVuE premises: the teacher's decisive-token probe (G-R1..G-R3)",
                self.revue_premises,
                lambda: (self.gates_dir() / REVUE_FILE).exists(),
            ),
        ]
        for variant, seed in self.opd_runs():
            out += self.opd_stages(variant, seed)
        return out

    def opd_stages(self, variant: str, seed: int) -> list[Stage]:
        """One OPD run and its evaluations, `synth_demo` and `told` (none when the teacher check
        refused the run)."""
        name, job = f"{variant}-s{seed}", f"OPD {variant}-s{seed}"
        refused = self.opd_dir(variant, seed) / REFUSED
        model = functools.partial(self.opd_model, variant, seed)
        evaluations = {
            f"opd-{name}": lambda: self.evaluate(f"opd-{name}", model()),
            f"told-opd-{name}": lambda: self.told(f"opd-{name}", model()),
        }
        out = [
            Stage(
                job,
                lambda: self.opd(variant, seed),
                lambda: self.opd_done(variant, seed),
                job=job,
            )
        ]
        for folder, run in evaluations.items():
            out.append(
                Stage(
                    f"evaluate {folder}",
                    lambda run=run: None if refused.exists() else run(),
                    lambda folder=folder: (
                        refused.exists() or bool(read_summary(self.eval_dir(folder)))
                    ),
                    job=job,
                )
            )
        return out

    def cold_start_stages(self) -> list[Stage]:
        """Stages 1-3: the model, the expert data, the cold-start SFT."""
        steps = self.cfg.sft.steps
        return [
            Stage("build the demo model", self.build_model, self.model_dir_done),
            Stage("scripted expert -> SFT data", self.build_data, self.data_done),
            Stage(
                "cold-start SFT",
                lambda: self.sft(self.sft_dir, self.model_dir, steps),
                lambda: is_complete(self.sft_dir, steps),
                job="cold-start SFT",
            ),
        ]

    def eval_run_stage(
        self, title: str, folder: str, run: Callable[[], None], job: str | None = None
    ) -> Stage:
        """A stage whose `run` writes the eval run `eval/FOLDER`: done once its summary is."""
        return Stage(title, run, lambda: bool(read_summary(self.eval_dir(folder))), job)

    def eval_stage(
        self, title: str, name: str, model: Callable[[], Path], job: str | None = None
    ) -> Stage:
        """Held-out `synth_demo` items, both modes (`eval/NAME`)."""
        return self.eval_run_stage(title, name, lambda: self.evaluate(name, model()), job)

    def keys_stage(
        self, title: str, name: str, model: Callable[[], Path], job: str | None = None
    ) -> Stage:
        """Held-out `keyed` and `marked` items, greedy (`eval/keys-NAME`)."""
        return self.eval_run_stage(title, f"keys-{name}", lambda: self.keys(name, model()), job)

    def told_stage(
        self, title: str, name: str, model: Callable[[], Path], job: str | None = None
    ) -> Stage:
        """Held-out `told` items, greedy (`eval/told-NAME`)."""
        return self.eval_run_stage(title, f"told-{name}", lambda: self.told(name, model()), job)

    def hint_reliance_done(self) -> bool:
        return all(
            read_summary(self.eval_dir(f"rescued-{arm}-s{seed}-by-{owner}"))
            for arm, seed in self.rl_runs()
            if self.rescued(arm, seed)
            for owner in (arm, "accuracy")
        )

    def model_dir_done(self) -> bool:
        return (self.model_dir / DEMO_MODEL_FILE).exists()

    def data_done(self) -> bool:
        return bool(read_summary(self.root / "sft"))

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
        data: Sequence[str] = ("sft",),
        lr: float | None = None,
        warmup_steps: int | None = None,
    ) -> None:
        """SFT of `model` on the trajectories of the `data` folders (images always in
        `sft/images`)."""
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
                    "train": [str(self.root / folder / SFT_FILE) for folder in data],
                    "images": str(sft_data / "images"),
                    "max_length": 1024,
                },
                "train": train,
            }
        )
        run_sft(cfg, resume=has_run(run_dir))

    def student_sft(self) -> None:
        student_init = self.root / "student-init"
        if not (student_init / DEMO_MODEL_FILE).exists():
            make_demo_model(student_init, seed=STUDENT_INIT_SEED)
        self.sft(self.student_dir, student_init, self.cfg.revue.student_sft_steps)

    def grpo(self, arm: str, seed: int) -> None:
        run_dir = self.rl_dir(arm, seed)
        r = self.cfg.rl
        if is_complete(run_dir, r.steps):
            return
        reward, hgce = RL_ARMS[arm]
        rollouts = r.prompts_per_step * r.group_size
        hints = self.uninformative_hints() if arm == UNINFORMATIVE else None
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
                    "hints": None if hints is None else str(hints),
                },
                "agent": sampling_agent().model_dump(),
                "rl": {"reward": reward, "hgce": {"enabled": hgce}},
            }
        )
        run_grpo(cfg, resume=has_run(run_dir))

    def uninformative_hints(self) -> Path:
        """The uninformative arm's hint cache: `UNINFORMATIVE_HINT` for every RL item HGCE has a
        hint for (the `keyed` ones), so both arms hint the same groups (written once)."""
        path = self.root / "rl" / HINTS_FILE
        if not path.exists():
            r = self.cfg.rl
            samples = SynthKeysRL().load(limit=r.items, seed=RL_SEED)
            hinted = [s for s in samples if "hint" in s.metadata]
            write_jsonl_atomic(path, uninformative_hint_rows(hinted))
        return path

    def teacher_sft(self) -> None:
        """The teacher learns the reflection-conditioned prompts it will score with: the
        one-hop rows (`beacon.demo.teacher_data`) and the `told` rows (`beacon.demo.told_rows`:
        plain, reflection-conditioned and wrong-path), each built once from the data stage's
        expert runs."""
        v, d = self.cfg.revue, self.cfg.data
        if not read_summary(self.root / TEACHER_DATA):
            samples = list(SynthDemo().load(limit=d.train_items, seed=d.train_seed))
            build_teacher_set(self.root, samples, d.train_seed, v.position)
        if not read_summary(self.root / TOLD_DATA):
            pool = told_pool(self.cfg)
            build_told_rows(
                self.root, [self.root / EXPERT_TOLD], pool, d.train_seed, v.position, ToldPlan()
            )
        self.sft(
            self.teacher_dir,
            self.teacher_source(),
            v.teacher_steps,
            data=[TEACHER_DATA, TOLD_DATA],
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
            summary = read_summary(self.eval_dir(f"{run[0]}-s{run[1]}"))
            return summary["overall"]["modes"]["tool"]["accuracy"] or 0.0

        best = max(self.rl_runs(), key=tool_accuracy)
        record.parent.mkdir(parents=True, exist_ok=True)
        chosen = {"teacher": str(self.rl_model(*best)), "tool_accuracy": tool_accuracy(best)}
        write_atomic(record, json.dumps(chosen, indent=2) + "\n")
        return self.rl_model(*best)

    def opd(self, variant: str, seed: int) -> None:
        """One OPD run; a teacher the check refuses ends it with `REFUSED` (the report says
        why), the demo goes on."""
        run_dir = self.opd_dir(variant, seed)
        if self.opd_done(variant, seed):
            return
        cfg = self.opd_config(variant, seed, run_dir)
        try:
            run_opd(cfg, resume=has_run(run_dir))
        except UserError as exc:  # the teacher check: recorded, the other runs go on
            write_atomic(run_dir / REFUSED, f"{exc}\n")
            logger.warning("OPD %s-s%d refused: %s", variant, seed, exc)

    def opd_config(self, variant: str, seed: int, run_dir: Path) -> OPDConfig:
        """OPD of the student by `variant` (`OPD_VARIANTS`) under `seed`, into `run_dir`. A
        control (the student its own teacher) and a shuffled-reflection run only warn at the
        teacher check: the first has nothing to teach, the second's borrowed reflections are
        meant to mislead."""
        v = self.cfg.revue
        context, weighting, source = OPD_VARIANTS[variant]
        control = variant == CONTROL
        teacher = self.student_model() if control else self.teacher_model()
        check = {"on_fail": "warn"} if control else {"on_fail": v.teacher_check}
        check["on_context_hurts"] = v.context_check
        rollouts = v.group_size * v.items_per_step
        return OPDConfig.model_validate(
            {
                "model": {"path": str(self.student_model())},
                "teacher": {"path": str(teacher), "context": context, "position": v.position},
                "teacher_check": {**check, "items": v.check_items},
                "data": {"benchmark": OPD_BENCH, "limit": self.cfg.rl.items, "seed": RL_SEED},
                "rollout": {
                    "group_size": v.group_size,
                    "items_per_step": v.items_per_step,
                    "agent": opd_agent().model_dump(),
                    "batch_size": rollouts,
                    "concurrency": rollouts,
                },
                "critic": {"kind": "scripted"},
                "revue": {
                    "weighting": weighting,
                    "reflection_source": source,
                    "critic_timeout_s": 60.0,
                    "critic_retries": 1,
                },
                "train": _train_config(
                    self.cfg,
                    run_dir,
                    seed,
                    v.steps,
                    v.lr,
                    warmup_steps=v.warmup_steps,
                    min_lr_ratio=1.0,
                ),
            }
        )

    def hgce_premises(self) -> None:
        """G-H1..G-H4 on the cold start: the RL pool's `keyed` items, `rl.group_size` rollouts
        each at temperature 1, without and with the hint (`gates/keyed*`)."""
        r, gates = self.cfg.rl, self.gates_dir()
        keyed_items = r.items // 3  # two `keyed` slots in `synth_keys.RL_MIX`'s six
        runs = {KEYED: gates / "keyed", KEYED_HINTED: gates / "keyed-hinted"}
        agent = sampling_agent()
        for bench, out in runs.items():
            self._run(out, self.sft_model(), [bench], RL_SEED, keyed_items, agent, r.group_size)
        write_record(gates / HGCE_FILE, hgce_premises(runs[KEYED], runs[KEYED_HINTED]))

    def revue_premises(self) -> None:
        """G-R1..G-R3 (`beacon.demo.premises.measure_teacher_probe`): the ReVuE run's teacher
        and critic on the student's rollouts of the pool's first `revue.probe_items` `told`
        items, before any OPD run (`gates/revue-probe/`, `gates/revue.json`)."""
        out = self.gates_dir() / "revue-probe"
        cfg = self.opd_config("revue", 0, out)
        probe = measure_teacher_probe(cfg, self.cfg.revue.probe_items)
        write_record(self.gates_dir() / REVUE_FILE, probe)

    def evaluate(self, name: str, model: Path) -> None:
        """Held-out evaluation of `model`: `eval.items` `synth_demo` items, tool and notool
        mode, greedy."""
        out, e = self.eval_dir(name), self.cfg.eval
        modes = ("tool", "notool")
        self._run(out, model, [TRAIN_BENCH], EVAL_SEED, e.items, greedy_agent(), modes=modes)

    def keys(self, name: str, model: Path) -> None:
        """Held-out `keyed` and `marked` items, greedy, tool mode (`eval/keys-NAME`)."""
        e = self.cfg.eval
        ids = {KEYED: e.keyed_items, MARKED: e.marked_items}
        self._run(
            self.eval_dir(f"keys-{name}"),
            model,
            list(ids),
            EVAL_SEED,
            max(ids.values()),
            keys_agent(),
            ids={bench: [str(i) for i in range(n)] for bench, n in ids.items()},
        )

    def keyed_sampled(self, name: str, model: Path) -> None:
        """Held-out `keyed` items at temperature 1, one rollout each: the sampled accuracy and
        P(key-first) beside the greedy threshold (`eval/keyed-sampled-NAME`)."""
        agent = keys_agent().model_copy(update={"temperature": 1.0})
        out = self.eval_dir(f"keyed-sampled-{name}")
        self._run(out, model, [KEYED], EVAL_SEED, self.cfg.eval.keyed_items, agent)

    def told(self, name: str, model: Path) -> None:
        """Held-out `told` items (half red), greedy, tool mode (`eval/told-NAME`)."""
        out = self.eval_dir(f"told-{name}")
        self._run(out, model, [TOLD], EVAL_SEED, self.cfg.eval.told_items, keys_agent())

    def hint_reliance(self) -> None:
        """Each HGCE run's rescued items (a hinted group with a right answer, `hgce.jsonl`),
        answered without the hint by the run's model and by the accuracy-only model of its seed."""
        for arm, seed in self.rl_runs():
            ids = self.rescued(arm, seed)
            if not ids:
                continue
            for owner in (arm, "accuracy"):
                name = f"rescued-{arm}-s{seed}-by-{owner}"
                model = self.rl_model(owner, seed)
                out, items = self.eval_dir(name), self.cfg.rl.items
                self._run(out, model, [RL_BENCH], RL_SEED, items, keys_agent(), ids={RL_BENCH: ids})

    def rescued(self, arm: str, seed: int) -> list[str]:
        """Ids of the items HGCE rescued in run (`arm`, `seed`), in first-rescue order."""
        rows = read_jsonl(self.rl_dir(arm, seed) / HGCE_LOG)
        return list(dict.fromkeys(str(r["sample_id"]) for r in rows if any(r["correct"])))

    def _run(
        self,
        out: Path,
        model: Path,
        benches: list[str],
        seed: int,
        limit: int,
        agent: AgentConfig,
        samples: int = 1,
        ids: dict[str, list[str]] | None = None,
        modes: Sequence[str] = ("tool",),
    ) -> None:
        """An eval run of `model` into `out` (resumes): `benches` under `seed`, `limit` items
        (or `ids` among them), `samples` per item (> 1: the agent samples)."""
        e = self.cfg.eval
        cfg = EvalConfig(
            engine=EngineConfig(name="hf", model=str(model), device="cpu", batch_size=e.batch_size),
            agent=agent,
            benchmarks=benches,
            limit=limit,
            ids=ids,
            modes=list(modes),
            samples=samples,
            concurrency=e.batch_size,
            seed=seed,
            out=str(out),
            bootstrap=0,
            report=False,
        )
        run_eval(cfg, progress=self.cfg.progress)
