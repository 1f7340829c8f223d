"""`report.md` of `beacon demo`: tables with seed-and-item CIs, plots, and what they say.

Every number is read back from the stage folders (eval `samples.jsonl`, training
`metrics.jsonl`), so the report can be rewritten at any time from a finished or partial demo.
Paths in it are relative to the demo folder (`demo_path`), whichever machine ran the demo.

The "findings" lines test a paper's claim on the paired difference of two variants on the same
items (`beacon.demo.stats.paired_difference`): "reproduced" or "the opposite of the paper" only
when the difference's 95% interval excludes 0, "no evidence of a difference" when it contains 0
(`finding`). A new section renders a comparison with `comparison_line`, e.g.
"Δ MA +NAAR − accuracy-only = +0.27 [+0.19, +0.35]: reproduced", and states claims as `Claim`s
rendered by `DemoReport.findings`. Where two reported metrics are one number
(`beacon.demo.stats.SAME_NUMBER`: harm = 1 − Text-Retain), a claim tests one of them and names
the other.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from beacon.demo.config import DemoConfig
from beacon.demo.pipeline import REFUSED, DemoStages
from beacon.demo.report_keys import keys_sections
from beacon.demo.stats import (
    Interval,
    direct_answer_push,
    paired_difference,
    variant_metrics,
)
from beacon.demo.told_rows import ToldPlan
from beacon.jsonl import read_jsonl as jsonl_records
from beacon.report.markdown import format_interval, markdown_table
from beacon.runfolder import SUMMARY_FILE, read_summary
from beacon.train.opd.probe import TeacherCheck

PREMISE_DIRECT_SHARE = 0.1
"""Share of sampled rollouts on an easy item that answer directly, in the NAAR-premise paragraph
(the SFT model's greedy eval shows its decision, not how often sampling departs from it)."""

TABLE_METRICS = (
    ("acc_tool", "acc tool"),
    ("acc_notool", "acc notool"),
    ("tool_rate", "tool rate"),
    ("p_tool_easy_design", "tool rate easy*"),
    ("p_tool_hard_design", "tool rate hard*"),
    ("mode_adaptiveness", "MA"),
    ("te", "TE"),
    ("delta_te", "Δ_TE"),
    ("gain", "gain"),
    ("harm", "harm"),
    ("text_retain", "Text-Retain"),
)

ARM_LABELS = {
    "accuracy": "accuracy-only",
    "naar": "+NAAR",
    "hgce": "+HGCE",
    "hgce_uninformative": "+HGCE, uninformative hint",
    "naar_hgce": "+NAAR +HGCE",
}


@dataclass(frozen=True)
class Claim:
    """A paper's claim about `variant` against `baseline` (report labels) on one metric."""

    variant: str
    baseline: str
    metric: str
    direction: int
    """+1 / -1: the paper has the metric higher / lower in `variant`; 0: the paper has it
    unchanged (no interval can show that: the finding then says whether it moved)."""
    text: str


BASELINE = ARM_LABELS["accuracy"]
RL_CLAIMS = (
    Claim(ARM_LABELS["naar"], BASELINE, "mode_adaptiveness", +1, "NAAR raises MA"),
    Claim(ARM_LABELS["naar"], BASELINE, "p_tool_easy_design", -1, "NAAR cuts easy* tool use"),
    Claim(
        ARM_LABELS["naar"],
        BASELINE,
        "text_retain",
        +1,
        "NAAR raises Text-Retain (lowers harm = 1 − Text-Retain)",
    ),
    Claim(ARM_LABELS["naar"], BASELINE, "acc_tool_hard_design", 0, "NAAR keeps hard* accuracy"),
    Claim(ARM_LABELS["hgce"], BASELINE, "gain", +1, "HGCE raises gain"),
    Claim(ARM_LABELS["hgce"], BASELINE, "acc_tool_hard_design", +1, "HGCE raises hard* accuracy"),
    Claim(ARM_LABELS["naar_hgce"], BASELINE, "mode_adaptiveness", +1, "NAAR + HGCE raises MA"),
)
"""What the RL findings check, each against accuracy-only (beacon.md §4, the paper's ablation)."""

STUDENT = "student (before)"
EVAL = {"teacher": "teacher", STUDENT: "student"}
"""Report label -> eval run name, for the models with one run."""
OPD_CLAIMS = (
    Claim("OPD vanilla", STUDENT, "acc_tool", +1, "vanilla OPD raises the student's accuracy"),
    Claim("OPD control", STUDENT, "acc_tool", 0, "the control (teacher = student) stays put"),
    Claim("OPD vanilla", "OPD control", "acc_tool", +1, "vanilla OPD beats the control"),
    Claim("OPD revue", STUDENT, "acc_tool", +1, "ReVuE raises the student's accuracy"),
    Claim("OPD revue", "OPD vanilla", "acc_tool", +1, "ReVuE beats vanilla OPD"),
    Claim("OPD reflection", "OPD vanilla", "acc_tool", +1, "the reflection alone beats vanilla"),
)
"""What the ReVuE findings check: distillation helps the student, ReVuE more than vanilla OPD."""


def read_jsonl(path: Path) -> list[dict]:
    """Every record of a run's JSONL file (`beacon.jsonl`'s bad-line policy); [] if missing."""
    return list(jsonl_records(path))


def check_line(check: dict) -> str:
    """One line of a `teacher_check.json`: the check's own, and what the context did."""
    result = TeacherCheck.model_validate(check)
    context = f"; context: {result.context.line()}" if result.context is not None else ""
    return result.line() + context


def fmt(value: Interval | float | None) -> str:
    """`0.62 [0.55, 0.70]`, `0.62`, or `n/a` for undefined values."""
    if value is None:
        return "n/a"
    interval = value if isinstance(value, tuple) else (value,)
    return format_interval(*interval, undefined="n/a")


class DemoReport:
    """Reads one demo folder; `write` renders report.md and the plots."""

    def __init__(self, cfg: DemoConfig) -> None:
        self.cfg = cfg
        self.paths = DemoStages(cfg)
        self.root = Path(cfg.out)
        self.metrics: dict[str, dict[str, Interval]] = {}
        self.runs: dict[str, list[list[dict]]] = {}
        """Per label, one list of sample records per seed: what paired differences resample."""

    def evaluated(self, label: str, eval_names: Sequence[str]) -> bool:
        """Compute `label`'s metrics from its eval runs; False when one is missing."""
        dirs = [self.paths.eval_dir(name) for name in eval_names]
        if not dirs or not all((d / SUMMARY_FILE).exists() for d in dirs):
            return False
        self.runs[label] = [read_jsonl(d / "samples.jsonl") for d in dirs]
        self.metrics[label] = variant_metrics(self.runs[label], self.cfg.eval.bootstrap)
        return True

    def metric_rows(self, labels: Sequence[str]) -> list[list[str]]:
        return [
            [label, *(fmt(self.metrics[label].get(key)) for key, _ in TABLE_METRICS)]
            for label in labels
            if label in self.metrics
        ]

    # -- sections ------------------------------------------------------------------------------
    def header(self) -> list[str]:
        c = self.cfg
        times = read_json(self.root / "timings.json")
        total = sum(times.values()) / 60 if times else math.nan
        return [
            "# Beacon demo: a miniature reproduction of Beacon and ReVuE",
            "",
            "A ~1.3M-parameter Qwen2-VL trained from scratch on `synth_demo` (digits in boxes; "
            "easy* = `large`/`small` digits readable in the model's 112-pixel view, hard* = "
            "`tiny` digits and `search` items whose box the question does not locate). Every "
            "stage is Beacon's real code path (agent loop, sandbox, verifier, SFT / GRPO / OPD "
            "trainers, metrics); the synthetic parts are the data, the **scripted expert** that "
            "writes the SFT trajectories and the **scripted critic** of ReVuE.",
            "",
            f"Sizes: {self.sizes()}, held-out eval {c.eval.items} items x {{tool, notool}}, "
            f"greedy. Stage times add up to {total:.1f} min ({c.jobs} GRPO / OPD jobs at once: "
            "their times overlap, the run took less; `beacon demo` prints its wall time).",
            "",
            "Intervals are 95% bootstrap intervals: each resample draws the held-out items once, "
            "for every seed and every variant, and each variant's seeds within it "
            "(`beacon.demo.stats`). Findings compare two variants by the *paired* difference "
            "on the same items (Δ, with its own 95% interval), not by whether the two intervals "
            'in a table overlap: "reproduced" or "the opposite of the paper" only where the '
            'interval of Δ excludes 0; "no evidence of a difference" where it contains 0, '
            "which does not show that the two are equal. "
            "MA, TE, Δ_TE, gain, harm and Text-Retain use the model's own easy/hard split "
            '(easy = solved without tools; harm = 1 − Text-Retain); "tool rate easy*" and '
            '"tool rate hard*" (P[tool] on easy* / hard* items) use the items\' design '
            "difficulty.",
            "",
        ]

    def sizes(self) -> str:
        """What this run trained, stage by stage, as the header states it."""
        c = self.cfg
        seeds = f"{c.seeds} seed{'s' if c.seeds > 1 else ''}"
        if c.cold_start == "shipped":
            parts = ["the shipped cold start (no data or SFT stage)"]
        else:
            parts = [
                f"{c.data.train_items} expert items (+{c.data.hinted_items} hinted, "
                f"{c.data.text_items} text-only)",
                f"SFT {c.sft.steps} steps x {c.sft.batch_size}",
            ]
        parts.append(
            f"GRPO {c.rl.steps} steps x {c.rl.prompts_per_step} prompts x G={c.rl.group_size} "
            f"per arm and seed ({seeds})"
        )
        if c.revue.enabled:
            parts.append(f"OPD {c.revue.steps} steps per variant and seed")
        return ", ".join(parts)

    def cold_start(self) -> list[str]:
        data = read_summary(self.root / "sft")
        lines = ["## 1. Cold start: SFT on the scripted expert's tool-biased trajectories", ""]
        if self.cfg.cold_start == "shipped":
            lines += [
                "The cold-start checkpoint shipped with Beacon (`beacon/demo/assets/cold_start`, "
                "the full demo's SFT stage, remade by `beacon demo --export-cold-start`).",
                "",
            ]
        if data:
            lines += markdown_table(
                ["SFT rows by mode/tool/category", "count"], [[k, str(v)] for k, v in data.items()]
            )
            lines.append("")
        if not self.evaluated("SFT", ["sft"]):
            return [*lines, "(SFT not evaluated yet)", ""]
        lines += markdown_table(
            ["model", *(name for _, name in TABLE_METRICS)], self.metric_rows(["SFT"])
        )
        easy = self.metrics["SFT"]["p_tool_easy_design"][0]
        verdict = "tool-biased, as in the paper" if easy >= 0.5 else "not tool-biased"
        note = f"After SFT the model crops on {easy:.0%} of easy* items: {verdict}."
        return [*lines, "", note, ""]

    def rl(self) -> list[str]:
        lines = ["## 2. RL ablation: the same SFT checkpoint, GRPO with four rewards", ""]
        labels = ["SFT"] if "SFT" in self.metrics else []
        for arm in self.cfg.rl.arms:
            names = [f"{arm}-s{seed}" for seed in range(self.cfg.seeds)]
            if self.evaluated(ARM_LABELS.get(arm, arm), names):
                labels.append(ARM_LABELS.get(arm, arm))
        lines += markdown_table(
            ["variant", *(name for _, name in TABLE_METRICS)], self.metric_rows(labels)
        )
        lines += ["", *self.rl_training(), "", *self.hint_reliance()]
        lines += ["### Findings against the paper's direction", ""]
        lines += self.findings(RL_CLAIMS) or ["(an arm is missing: no comparison)"]
        return [*lines, "", *self.naar_premise()]

    def naar_premise(self) -> list[str]:
        """What NAAR needs of the cold start: direct answers on easy items that are right."""
        if "SFT" not in self.metrics:
            return []
        sft = self.metrics["SFT"]
        reading, crops = sft["acc_notool_easy_design"][0], sft["acc_tool_easy_design"][0]
        if math.isnan(reading) or math.isnan(crops):
            return []
        naar = direct_answer_push("naar", reading, PREMISE_DIRECT_SHARE, crops)
        binary = direct_answer_push("binary", reading, PREMISE_DIRECT_SHARE, crops)
        sweep = ", ".join(
            f"{direct_answer_push('naar', r, PREMISE_DIRECT_SHARE, crops):+.2f} at {r:.0%}"
            for r in (0.2, 0.4, 0.6, 0.8)
        )
        return [
            f"NAAR's premise: the SFT model answers {reading:.0%} of easy* items right without "
            f"the tool and {crops:.0%} in tool mode. NAAR rewards skipping the tool only in "
            "groups where a text-only answer is right ('text-only right' above); elsewhere a "
            "wrong direct answer scores 0 against correct crops. With one rollout in "
            f"{1 / PREMISE_DIRECT_SHARE:.0f} answering directly, the summed advantage of direct "
            f"answers per easy group is {naar:+.2f} under NAAR at this reading and {binary:+.2f} "
            f"under accuracy-only (NAAR at other readings: {sweep}; "
            "`beacon.demo.stats.direct_answer_push`, the trainer's own group scoring). So NAAR "
            "turns the decision toward answering directly *where that is right* only from a "
            "cold start that reads easy items (the feasibility study's read 84% and flipped "
            "within 45 steps). From a weak reader it can still cut tool use, but without "
            "telling items apart: a lucky direct guess on a hard item (1 in 10 with ten digits) "
            "enters the same text-only branch.",
            "",
        ]

    def rl_training(self) -> list[str]:
        rows = []
        for arm in self.cfg.rl.arms:
            logs = [
                read_jsonl(self.paths.rl_dir(arm, s) / "metrics.jsonl")
                for s in range(self.cfg.seeds)
            ]
            steps = [row for log in logs for row in log]
            if not steps:
                continue
            rows.append(
                [
                    ARM_LABELS.get(arm, arm),
                    str(len(steps)),
                    f"{total(steps, 'rl/groups_kept')}/{total(steps, 'rl/groups')}",
                    f"{total(steps, 'rl/groups_easy')}",
                    f"{total(steps, 'rl/groups_hinted')}",
                    f"{total(steps, 'rl/groups_rescued')}",
                    sampled_tool_trend(logs),
                    f"{np.mean([row['step_s'] for row in steps]):.1f}",
                ]
            )
        header = [
            "arm",
            "steps (all seeds)",
            "groups kept",
            "text-only right",
            "groups hinted",
            "rescued",
            "sampled tool rate, first -> last 10 steps",
            "s/step",
        ]
        return ["GRPO training (summed over seeds):", "", *markdown_table(header, rows)]

    def hint_reliance(self) -> list[str]:
        """Per HGCE arm: accuracy without the hint on the items its hints rescued in training,
        beside accuracy-only's on the same items (`DemoStages.hint_reliance`)."""
        lines = []
        for arm in self.cfg.rl.arms:
            right, others, items = 0, 0, 0
            for seed in range(self.cfg.seeds):
                own = read_jsonl(
                    self.paths.eval_dir(f"rescued-{arm}-s{seed}-by-{arm}") / "samples.jsonl"
                )
                base = read_jsonl(
                    self.paths.eval_dir(f"rescued-{arm}-s{seed}-by-accuracy") / "samples.jsonl"
                )
                right += sum(r["correct"] for r in own)
                others += sum(r["correct"] for r in base)
                items += len(own)
            if items:
                lines.append(
                    f"- Hint reliance of {ARM_LABELS.get(arm, arm)}: on the {items} items its "
                    f"hints rescued in training (all seeds), it answers {right / items:.2f} "
                    f"right without the hint; accuracy-only of the same seeds {others / items:.2f}."
                )
        return [*lines, ""] if lines else []

    def findings(self, claims: Sequence[Claim]) -> list[str]:
        """One line per claim whose two variants are evaluated, on their paired difference."""
        lines = []
        for claim in claims:
            if claim.variant not in self.runs or claim.baseline not in self.runs:
                continue
            difference = paired_difference(
                self.runs[claim.variant],
                self.runs[claim.baseline],
                claim.metric,
                self.cfg.eval.bootstrap,
            )
            a, b = (self.metrics[label][claim.metric] for label in (claim.variant, claim.baseline))
            lines.append(
                f"- {claim.text}: {claim.variant} {fmt(a.point)} vs {claim.baseline} "
                f"{fmt(b.point)}: {finding(difference, claim.direction)}"
            )
        return lines

    def revue(self) -> list[str]:
        lines = ["## 3. ReVuE in miniature: vanilla OPD vs ReVuE into a fresh student", ""]
        if not self.cfg.revue.enabled:
            return [*lines, "(disabled: revue.enabled=false)", ""]
        labels = [label for label in ("teacher", STUDENT) if self.evaluated(label, [EVAL[label]])]
        refused = []
        for variant in self.cfg.revue.variants:
            runs = self.opd_runs(variant)
            refused += [self.paths.opd_dir(v, s) / REFUSED for v, s in runs]
            if self.evaluated(f"OPD {variant}", [f"opd-{v}-s{s}" for v, s in runs]):
                labels.append(f"OPD {variant}")
        header = ["model", "acc tool", "acc notool", "tool rate", "tokens (tool)"]
        header += ["complete reflections", "impact sparsity", "steps skipped"]
        rows = [self.revue_row(label) for label in labels]
        lines += [*self.teacher_note(), "", *markdown_table(header, rows), ""]
        lines += [
            f"- {path.parent.name} refused: {path.read_text().strip()}"
            for path in refused
            if path.exists()
        ]
        found = self.findings(OPD_CLAIMS)
        if found:
            lines += ["", "### Findings against the paper's direction", "", *found, ""]
        return lines

    def opd_runs(self, variant: str) -> list[tuple[str, int]]:
        """The demo's OPD runs of `variant` (the control: seed 0 only)."""
        return [(v, seed) for v, seed in self.paths.opd_runs() if v == variant]

    def revue_row(self, label: str) -> list[str]:
        m = self.metrics[label]
        variant = label.removeprefix("OPD ") if label.startswith("OPD ") else None
        extra = self.opd_stats(variant) if variant else ("", "", "")
        tokens = self.response_tokens(label)
        return [
            label,
            fmt(m["acc_tool"]),
            fmt(m["acc_notool"]),
            fmt(m["tool_rate"]),
            f"{tokens:.1f}",
            *extra,
        ]

    def teacher_note(self) -> list[str]:
        """Where the teacher comes from, and what OPD's teacher check measured of it."""
        source = read_json(self.root / "opd" / "teacher.json").get("teacher")
        v = self.cfg.revue
        lines = [
            f"Teacher: `{demo_path(source, self.root) if source else '?'}` (the RL run with the "
            f"best tool-mode accuracy) after {v.teacher_steps} SFT steps on plain and "
            "reflection-conditioned prompts (`beacon.demo.teacher_data`); every variant distils "
            f"from it, {v.steps} steps of {v.items_per_step} items x {v.group_size} rollouts, "
            f"{self.cfg.seeds} seeds; the control distils from the student itself."
        ]
        for variant in ("vanilla", "revue"):
            check = read_json(self.paths.opd_dir(variant, 0) / "teacher_check.json")
            if check:
                lines.append(f"- teacher check ({variant}, seed 0): {check_line(check)}")
        return lines

    def response_tokens(self, label: str) -> float:
        """Mean response tokens in tool mode over the label's eval runs."""
        if label in EVAL:
            names = [EVAL[label]]
        else:
            variant = label.removeprefix("OPD ")
            names = [f"opd-{v}-s{seed}" for v, seed in self.opd_runs(variant)]
        records = [
            r
            for name in names
            for r in read_jsonl(self.paths.eval_dir(name) / "samples.jsonl")
            if r["mode"] == "tool"
        ]
        return float(np.mean([r["response_tokens"] for r in records])) if records else math.nan

    def opd_stats(self, variant: str) -> tuple[str, str, str]:
        """Complete reflections, mean impact sparsity and skipped steps over the seeds' runs."""
        rows = [
            row
            for v, seed in self.opd_runs(variant)
            for row in read_jsonl(self.paths.opd_dir(v, seed) / "metrics.jsonl")
        ]
        coverage = {
            k.removeprefix("coverage_"): sum(r.get(k, 0) for r in rows)
            for r0 in rows[:1]
            for k in r0
            if k.startswith("coverage_")
        }
        slots = sum(coverage.values())
        complete = f"{coverage.get('complete', 0)}/{slots}" if slots else "n/a (no critic)"
        sparsity = [r["impact_sparsity"] for r in rows if r.get("impact_sparsity") is not None]
        skipped = f"{sum(r.get('update_skipped', 0) for r in rows)}/{len(rows)}"
        return complete, (f"{np.mean(sparsity):.2f}" if sparsity else "n/a"), skipped

    def timings(self) -> list[str]:
        times = read_json(self.root / "timings.json")
        rows = [[name, f"{seconds:.0f}"] for name, seconds in times.items()]
        return ["## Stage times", "", *markdown_table(["stage", "seconds"], rows), ""]

    def write(self) -> Path:
        body = [*self.header(), *self.cold_start(), *self.rl(), *self.revue()]
        c = self.cfg
        variants = c.revue.variants if c.revue.enabled else []
        if self.paths.tests_hgce() or variants:
            body += keys_sections(
                self.root, c.seeds, c.rl.arms, variants, c.eval.bootstrap, keys_knobs(c)
            )
        plots = self.plots()
        body += ["## Plots", "", *(f"![{name}]({name}.png)" for name in plots), ""]
        body += self.timings()
        path = self.root / "report.md"
        path.write_text("\n".join(body))
        return path

    # -- plots ---------------------------------------------------------------------------------
    def plots(self) -> list[str]:
        made = []
        for name, draw in (
            ("learning_curves", self.plot_learning_curves),
            ("adaptivity", self.plot_adaptivity),
            ("accuracy_vs_tool_rate", self.plot_accuracy_vs_tool),
            ("revue", self.plot_revue),
        ):
            fig = Figure(figsize=(9, 4), layout="constrained")
            if draw(fig):
                FigureCanvasAgg(fig).print_png(str(self.root / f"{name}.png"))
                made.append(name)
        return made

    def plot_learning_curves(self, fig: Figure) -> bool:
        """SFT loss (when this run trained its cold start) beside GRPO's tool rate and accuracy."""
        sft = read_jsonl(self.paths.sft_dir / "metrics.jsonl")
        axes = fig.subplots(1, 3 if sft else 2)
        ax_tool, ax_acc = axes[-2:]
        if sft:
            axes[0].plot([r["step"] for r in sft], [r["loss"] for r in sft])
            axes[0].set(title="SFT loss", xlabel="step", yscale="log")
        drawn = False
        for arm in self.cfg.rl.arms:
            logs = [
                read_jsonl(self.paths.rl_dir(arm, s) / "metrics.jsonl")
                for s in range(self.cfg.seeds)
            ]
            for ax, key in ((ax_tool, "rl/tool_rate"), (ax_acc, "rl/accuracy")):
                curve = mean_curve(logs, key)
                if curve:
                    ax.plot(*zip(*curve, strict=True), label=ARM_LABELS.get(arm, arm))
                    drawn = True
        ax_tool.set(title="GRPO: tool-call rate in rollouts", xlabel="step", ylim=(-0.05, 1.05))
        ax_acc.set(title="GRPO: rollout accuracy", xlabel="step", ylim=(-0.05, 1.05))
        ax_acc.legend(fontsize=7)
        return bool(sft) or drawn

    def plot_adaptivity(self, fig: Figure) -> bool:
        labels = list(self.metrics)
        if not labels:
            return False
        axes = fig.subplots(1, 3)
        for ax, key, title in zip(
            axes,
            ("mode_adaptiveness", "delta_te", "p_tool_easy_design"),
            ("MA", "Δ_TE", "tool rate on easy* items"),
            strict=True,
        ):
            bars(ax, [self.metrics[label][key] for label in labels], labels)
            ax.set_title(title)
        return True

    def plot_revue(self, fig: Figure) -> bool:
        """The ReVuE comparison: the student before distillation, after vanilla OPD, after ReVuE."""
        variants = self.cfg.revue.variants
        labels = [k for k in (STUDENT, *(f"OPD {v}" for v in variants)) if k in self.metrics]
        if not labels:
            return False
        for ax, key, title in zip(
            fig.subplots(1, 3),
            ("acc_tool", "acc_notool", "tool_rate"),
            ("student accuracy (tool mode)", "student accuracy (notool)", "student tool-call rate"),
            strict=True,
        ):
            bars(ax, [self.metrics[label][key] for label in labels], labels)
            ax.set(title=title, ylim=(0, 1.05))
        return True

    def plot_accuracy_vs_tool(self, fig: Figure) -> bool:
        if not self.metrics:
            return False
        ax = fig.subplots()
        for label, m in self.metrics.items():
            ax.scatter(m["tool_rate"][0], m["acc_tool"][0], label=label)
        ax.set(
            xlabel="tool-call rate (tool mode)",
            ylabel="accuracy (tool mode)",
            xlim=(-0.05, 1.05),
            ylim=(-0.05, 1.05),
        )
        ax.legend(fontsize=7)
        return True


def keys_knobs(cfg: DemoConfig) -> dict[str, object]:
    """Demo II's task knobs (`synth_keys` rows in the cold start, the teacher's `told` rows, the
    probe's size), as the report prints them beside the rules."""
    d, plan = cfg.data, ToldPlan()
    return {
        "unhinted `keyed` SFT rows (N_u)": f"{d.keyed_unhinted_items} of "
        f"{d.keyed_unhinted_items + d.keyed_hinted_items}",
        "hinted `keyed` SFT rows that crop the key first": f"{d.hint_followed:.0%}",
        "`marked` SFT rows": d.marked_items,
        "`told` SFT rows": f"{d.told_items} (half red; a red key noted, then mapped as grey)",
        "teacher's `told` rows, plain / conditioned / wrong-path": f"{plan.plain} "
        f"({plan.red_plain:.0%} red, mapped {plan.red_plain_mapping}) / {plan.conditioned} "
        f"({plan.red_conditioned:.0%} red) / {plan.wrong_path}",
        "decisive-token probe": f"{cfg.revue.probe_items} `told` items",
    }


def bars(ax: Axes, values: Sequence[Interval], labels: Sequence[str]) -> None:
    """One bar per label at the point estimate, its 95% interval as the error bar."""
    points = np.array([v[0] for v in values])
    errors = np.array([[p - v[1], v[2] - p] for p, v in zip(points, values, strict=True)]).T
    ax.bar(range(len(labels)), np.nan_to_num(points), yerr=np.nan_to_num(errors), capsize=3)
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=7)


def total(rows: Sequence[Mapping], key: str) -> int:
    """Sum of a count over log rows (missing or NaN counts as 0)."""
    return int(sum(v for row in rows if isinstance(v := row.get(key), (int, float)) and v == v))


def mean_curve(logs: Sequence[Sequence[Mapping]], key: str) -> list[tuple[int, float]]:
    """(step, mean over seeds of `key`) where any seed has a finite value."""
    by_step: dict[int, list[float]] = {}
    for log in logs:
        for row in log:
            value = row.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value):
                by_step.setdefault(row["step"], []).append(float(value))
    return [(step, float(np.mean(v))) for step, v in sorted(by_step.items())]


def sampled_tool_trend(logs: Sequence[Sequence[Mapping]], window: int = 10) -> str:
    """The rollouts' tool rate over the first and the last `window` steps (mean over seeds):
    where the reward moves the decision before greedy held-out choices flip."""
    curve = [value for _, value in mean_curve(logs, "rl/tool_rate")]
    if not curve:
        return "n/a"
    return f"{np.mean(curve[:window]):.2f} -> {np.mean(curve[-window:]):.2f}"


def verdict(difference: Interval, direction: int | None = None) -> str:
    """What a paired difference A − B shows about a claim that A is higher (`direction` +1),
    lower (-1) or unchanged (0), or, with no claim (None), about A against B.

    Only an interval that excludes 0 is evidence: one that contains 0 is "no evidence of a
    difference", never "kept" (no interval shows that two metrics are equal).
    """
    if math.isnan(difference.point) or math.isnan(difference.low):
        return "not tested"
    if not difference.excludes_zero:
        return "no evidence of a difference"
    went = 1 if difference.low > 0 else -1
    if direction is None:
        return "higher" if went > 0 else "lower"
    if direction == 0:
        return "changed, not reproduced"
    return "reproduced" if went == direction else "the opposite of the paper"


def fmt_difference(difference: Interval) -> str:
    """`+0.27 [+0.19, +0.35]`: a difference and its interval, signed."""
    return format_interval(*difference, spec="{:+.2f}", undefined="n/a")


def finding(difference: Interval, direction: int) -> str:
    """The verdict on a paper's claim with the paired difference it rests on."""
    if math.isnan(difference.point):
        return "undefined, not tested"
    if math.isnan(difference.low):
        return f"not tested (Δ = {difference.point:+.2f}, no interval: eval.bootstrap=0)"
    side = "excludes" if difference.excludes_zero else "contains"
    return (
        f"{verdict(difference, direction)} (Δ = {difference.point:+.2f}, 95% CI "
        f"[{difference.low:+.2f}, {difference.high:+.2f}] {side} 0)"
    )


def comparison_line(
    metric: str, label_a: str, label_b: str, difference: Interval, direction: int | None = None
) -> str:
    """`Δ MA +NAAR − accuracy-only = +0.27 [+0.19, +0.35]: reproduced`.

    `difference` is `paired_difference(runs_a, runs_b, ...)`; `direction` the paper's claim
    (`verdict`), None for a comparison the paper makes no claim about.
    """
    return (
        f"Δ {metric} {label_a} − {label_b} = {fmt_difference(difference)}: "
        f"{verdict(difference, direction)}"
    )


def demo_path(path: str | Path, root: Path) -> str:
    """`path` as report.md names it: relative to the demo folder `root`.

    Stages record absolute paths of the machine that ran them. A path outside `root` (recorded
    before the folder moved) is named by its longest tail that exists in `root`, else by its
    last part.
    """
    path = Path(path)
    if not path.is_absolute():
        return path.as_posix()
    if path.is_relative_to(root):
        return path.relative_to(root).as_posix()
    tails = (Path(*path.parts[start:]) for start in range(1, len(path.parts)))
    return next((t.as_posix() for t in tails if (root / t).exists()), path.name)


def read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def write_report(cfg: DemoConfig) -> Path:
    return DemoReport(cfg).write()
