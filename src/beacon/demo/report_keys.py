"""The demo-II section of `report.md`: HGCE and ReVuE on `synth_keys`, judged by pre-registered
rules (demo2_design §2.7, §4; `beacon.demo.gates`, `beacon.demo.decisions`).

`keys_sections` reads the demo folder the stages write and renders, in this order: the rules
(before any result), the premise tables, then per claim the primary paired difference with its
per-seed table, the content control, the strata and controls, the mechanism lines and the
verdict. Every number is read back from the folder, so a partial demo renders too: a run or file
that is missing prints "not run" / "not measured", and the verdict machinery then says "not
tested" (an unmeasured premise fails its gate; a comparison without runs has no interval).

The held-out `synth_keys` evals are tool mode only, and `beacon.demo.stats` pairs each item's
tool and notool records (its adaptivity metrics need both). `tool_items` therefore gives each
tool record a notool twin with the same outcome; only `acc_tool` is read from such runs, which
the twin leaves as it is. An arm with some seeds missing is compared on the seeds it has; its
seed table shows how many, and the missing runs are named beside the comparison.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path

import numpy as np

from beacon.benchmarks.synth_keys import TOLD_QUESTION
from beacon.data.eval_stages import run_trajectories
from beacon.demo.decisions import (
    Comparison,
    HgceEvidence,
    RevueEvidence,
    compare,
    hgce_verdict,
    render_rules,
    render_seed_table,
    render_verdict,
    revue_verdict,
)
from beacon.demo.gates import Gate, HgcePremises, hgce_gates, render_gates, revue_gates
from beacon.demo.premises import (
    HGCE_FILE,
    REVUE_FILE,
    accuracy,
    key_first,
    read_record,
    red_key,
    revue_premises,
    sampled_run,
)
from beacon.demo.stats import variant_metrics
from beacon.jsonl import read_jsonl
from beacon.report.markdown import format_interval, markdown_table
from beacon.report.revue_analysis import analyze_run
from beacon.runfolder import CRITIC_LOG, METRICS_FILE, SUMMARY_FILE
from beacon.train.grpo.recipe import HGCE_LOG
from beacon.train.opd.critic_schema import STAGES, CriticOutputError, parse_critic_output
from beacon.types import Trajectory

KEYED, MARKED, TOLD = "synth_keys_keyed", "synth_keys_marked", "synth_keys_told"
ACCURACY, HGCE, UNINFORMATIVE = "accuracy", "hgce", "hgce_uninformative"
VANILLA, REVUE, SHUFFLED, CONTROL = "vanilla", "revue", "shuffled", "control"
WINDOW = 10
"""Training steps per column of the sampled decision-rate table."""
REFUSED = "refused.txt"
"""An OPD run the teacher check refused (`beacon.demo.pipeline`)."""
LABELS = {
    ACCURACY: "accuracy-only",
    "naar": "+NAAR",
    HGCE: "HGCE",
    UNINFORMATIVE: "uninformative hint",
    VANILLA: "vanilla OPD",
    REVUE: "ReVuE",
    SHUFFLED: "shuffled reflection",
    CONTROL: "control (teacher = student)",
}
CONSTRUCTED = (
    "The red-key weakness is **constructed** (design §5.1 G1): the cold start's red `told` "
    "rows note the key red and then map it as a grey one, and so do the teacher's plain rows; "
    "only its reflection-conditioned rows crop the cell a red key names. A positive (a) shows "
    "that ReVuE exploits a teacher error a reflection can fix, not that real teachers make "
    "such errors."
)
NO_CRITIC = "no critic"
"""Coverage and stages of a variant without critic exchanges (vanilla OPD)."""

Runs = list[list[dict]]
"""One list of `samples.jsonl` records per seed."""


def every(record: Mapping) -> bool:
    """Keeps every record."""
    return True


def tool_items(records: Iterable[Mapping]) -> list[dict]:
    """Tool-mode records, each with a notool twin (module docstring)."""
    out = []
    for record in records:
        if record.get("mode") == "tool":
            out += [dict(record), {**record, "mode": "notool"}]
    return out


@dataclass(frozen=True)
class ArmRuns:
    """One arm's finished eval runs (one per seed) and the names of those not found."""

    label: str
    runs: Runs
    missing: tuple[str, ...] = ()


@dataclass(frozen=True)
class Line:
    """A comparison as the report prints it: what it measures, on which items."""

    title: str
    comparison: Comparison
    missing: tuple[str, ...]
    ran: bool


def finite_mean(rows: Iterable[Mapping], key: str) -> float:
    """Mean of `key` over rows where it is a finite number; NaN if none."""
    values = [v for r in rows if isinstance(v := r.get(key), (int, float)) and math.isfinite(v)]
    return float(np.mean(values)) if values else math.nan


def num(value: float | None, spec: str = "{:.2f}") -> str:
    """A number, or `—` where it is undefined."""
    return "—" if value is None or math.isnan(value) else spec.format(value)


def keyed_item(record: Mapping) -> bool:
    return record["benchmark"] == KEYED


def marked_item(record: Mapping) -> bool:
    return record["benchmark"] == MARKED


def told_item(record: Mapping) -> bool:
    return record["benchmark"] == TOLD


def red_item(record: Mapping) -> bool:
    """A held-out `told` item with a red key (the stratum where the teacher errs)."""
    return told_item(record) and red_key(record)


def grey_item(record: Mapping) -> bool:
    """A held-out `told` item with a plain (grey) key."""
    return told_item(record) and not red_item(record)


def fmt_accuracy(runs: Runs, n_resamples: int) -> str:
    """Pooled tool-mode accuracy over seeds with its 95% interval (`variant_metrics`)."""
    return format_interval(*variant_metrics(runs, n_resamples)["acc_tool"], undefined="n/a")


def item_kind(exchange: Mapping) -> str:
    """`told` when the critic request asks the `told` question, else `1-hop synth_demo`."""
    messages = exchange.get("request", {}).get("messages", [])
    parts = [m.get("content") for m in messages]
    text = "\n".join(p if isinstance(p, str) else "\n".join(map(str, p or [])) for p in parts)
    return "told" if TOLD_QUESTION in text else "1-hop synth_demo"


def exchange_stages(exchange: Mapping) -> list[str]:
    """The stage of each rollout in one accepted critic reply; [] for a failed exchange."""
    if exchange.get("error") or not exchange.get("response"):
        return []
    try:
        return [d.stage for d in parse_critic_output(exchange["response"]).rollout_diagnoses]
    except CriticOutputError:
        return []


@dataclass
class KeysReport:
    """Reads one demo folder (`root`) and renders demo II's section; see `keys_sections`."""

    root: Path
    seeds: int
    arms: Sequence[str]
    variants: Sequence[str]
    n_resamples: int
    knobs: Mapping[str, object]

    # -- reading -------------------------------------------------------------------------------
    def eval_dir(self, name: str) -> Path:
        return self.root / "eval" / name

    def done(self, name: str) -> bool:
        """An eval run that finished (its summary is written last)."""
        return (self.eval_dir(name) / SUMMARY_FILE).exists()

    def arm(
        self,
        label: str,
        names: Sequence[str],
        keep: Callable[[Mapping], bool],
        outcome: Callable[[Trajectory], bool] | None = None,
    ) -> ArmRuns:
        """The finished runs among `names`, records filtered by `keep`. With `outcome`, each
        record's `correct` becomes `outcome(its trajectory)`: the same paired bootstrap then
        resamples that flag (the sampled P(key-first)) as it resamples accuracy."""
        runs, missing = [], []
        for name in names:
            if not self.done(name):
                missing.append(f"eval/{name}")
                continue
            if outcome is None:
                rows = read_jsonl(self.eval_dir(name) / "samples.jsonl")
            else:
                episodes = run_trajectories(self.eval_dir(name))
                rows = ({**e.record, "correct": outcome(e.trajectory)} for e in episodes)
            runs.append(tool_items(r for r in rows if keep(r)))
        return ArmRuns(label, runs, tuple(missing))

    def per_seed(self, pattern: str, arm: str, seeds: int | None = None) -> list[str]:
        """`pattern` filled with the arm and each seed."""
        count = self.seeds if seeds is None else seeds
        return [pattern.format(arm=arm, seed=s) for s in range(count)]

    def keys_arm(self, arm: str, keep: Callable[[Mapping], bool]) -> ArmRuns:
        """An RL arm's greedy held-out runs, the records `keep` keeps (`keyed`, `marked`)."""
        names = self.per_seed("keys-{arm}-s{seed}", arm)
        return self.arm(LABELS.get(arm, arm), names, keep)

    def told_arm(self, variant: str, keep: Callable[[Mapping], bool] = told_item) -> ArmRuns:
        """An OPD variant's greedy `told` runs (the control has seed 0 only)."""
        seeds = 1 if variant == CONTROL else None
        names = self.per_seed("told-opd-{arm}-s{seed}", variant, seeds)
        return self.arm(LABELS.get(variant, variant), names, keep)

    def line(self, title: str, a: ArmRuns, b: ArmRuns) -> Line:
        """A − B by `compare`, with the runs that were not found."""
        c = compare(a.label, a.runs, b.label, b.runs, n_resamples=self.n_resamples)
        return Line(title, c, a.missing + b.missing, bool(a.runs and b.runs))

    # -- rendering -----------------------------------------------------------------------------
    def render_line(self, line: Line) -> list[str]:
        """`- title: A − B +0.15 [+0.07, +0.23]`, then its seed table; or "not run"."""
        missing = ", ".join(f"`{m}`" for m in line.missing)
        if not line.ran:
            return [f"- {line.title}: not run ({missing or 'no runs'}).", ""]
        partial = f" Not run: {missing}." if missing else ""
        return [
            f"- {line.title}: {line.comparison.text}.{partial}",
            "",
            *render_seed_table(line.comparison),
            "",
        ]

    def sections(self) -> list[str]:
        return [*self.intro(), *self.rules(), *self.premises(), *self.hgce(), *self.revue()]

    def intro(self) -> list[str]:
        return [
            "## 4. Demo II: HGCE and ReVuE on `synth_keys`",
            "",
            "`synth_keys` (a 3×3 grid of fixed boxes; a key box names the cell to read) gives each "
            "method an intermediate decision to get right: which cell to crop. HGCE's items are "
            'unhinted `keyed` (only the key leads to the target; the hint says "crop the key '
            "first\"); ReVuE's are `told` (the question states the key; half the held-out keys are "
            f"red and count from the other end). {CONSTRUCTED}",
            "",
        ]

    def rules(self) -> list[str]:
        knobs = ", ".join(f"{name} {value}" for name, value in self.knobs.items())
        frozen = [f"Knobs, frozen from the pilot on the cold start before any arm ran: {knobs}."]
        return ["### 4.1 Pre-registered rules", "", *render_rules(), "", *frozen, ""]

    def premises(self) -> list[str]:
        lines = ["### 4.2 Premises, measured on the cold start before any compared arm", ""]
        lines += ["HGCE (b):", "", *render_gates(self.hgce_gates)]
        lines += [*self.unmeasured(HGCE_FILE), "", "ReVuE (a):", ""]
        lines += [*render_gates(self.revue_gates), *self.unmeasured(REVUE_FILE)]
        return [*lines, *self.probe_lines(), ""]

    def unmeasured(self, name: str) -> list[str]:
        """The "not measured" note of a premise file the gates stage did not write."""
        if (self.root / "gates" / name).exists():
            return []
        return ["", f"`gates/{name}`: not measured (its stage did not run), so its gates fail."]

    @cached_property
    def hgce_gates(self) -> list[Gate]:
        record = read_record(self.root / "gates" / HGCE_FILE)
        values = {f.name: record.get(f.name) for f in fields(HgcePremises)}
        return hgce_gates(HgcePremises(**values))

    @cached_property
    def revue_gates(self) -> list[Gate]:
        record = read_record(self.root / "gates" / REVUE_FILE)
        student, teacher = self.eval_dir("told-student"), self.eval_dir("told-teacher")
        return revue_gates(revue_premises(record, student, teacher))

    def probe_lines(self) -> list[str]:
        """The teacher probe's and the grounding gate's own lines (G-R1..G-R3)."""
        record = read_record(self.root / "gates" / REVUE_FILE)
        found = [f"- {record[k]}" for k in ("probe_line", "grounding_line") if record.get(k)]
        return ["", *found] if found else []

    # -- (b) HGCE ------------------------------------------------------------------------------
    def hgce_lines(self) -> dict[str, Line]:
        """The comparisons (b) rests on, by role."""
        hgce, acc = self.keys_arm(HGCE, keyed_item), self.keys_arm(ACCURACY, keyed_item)
        rescued = [self.per_seed("rescued-{arm}-s{seed}-by-" + o, HGCE) for o in (HGCE, ACCURACY)]
        reliance = [
            self.arm(LABELS[o], n, every) for o, n in zip((HGCE, ACCURACY), rescued, strict=True)
        ]
        sampled = [self.per_seed("keyed-sampled-{arm}-s{seed}", a) for a in (HGCE, ACCURACY)]
        first = [
            self.arm(LABELS[a], n, keyed_item, lambda t: key_first(t, "keyed"))
            for a, n in zip((HGCE, ACCURACY), sampled, strict=True)
        ]
        return {
            "primary": self.line("Primary, unhinted `keyed`", hgce, acc),
            "content": self.line(
                "Content control, unhinted `keyed`", hgce, self.keys_arm(UNINFORMATIVE, keyed_item)
            ),
            "reliance": self.line("Hint reliance, unhinted, on the items HGCE rescued", *reliance),
            "marked": self.line(
                "`marked` drop (decoy key: an over-applied key-first shows here)",
                self.keys_arm(ACCURACY, marked_item),
                self.keys_arm(HGCE, marked_item),
            ),
            "key_first": self.line("Sampled P(key-first), unhinted `keyed`, T = 1", *first),
        }

    def hgce(self) -> list[str]:
        lines = self.hgce_lines()
        evidence = HgceEvidence(
            gates=self.hgce_gates,
            primary=lines["primary"].comparison,
            content=lines["content"].comparison,
            hint_reliance=lines["reliance"].comparison.difference,
            marked_drop=lines["marked"].comparison.difference,
            key_first_shift=lines["key_first"].comparison.difference,
        )
        body = [line for role in lines.values() for line in self.render_line(role)]
        return [
            "### 4.3 (b) HGCE vs accuracy-only",
            "",
            "Greedy held-out accuracy in tool mode unless stated (180 `keyed`, 120 `marked` "
            "items).",
            "",
            *self.keys_table(),
            *body,
            *self.hgce_mechanism(),
            render_verdict(hgce_verdict(evidence)),
            "",
        ]

    def keys_table(self) -> list[str]:
        """`keyed` and `marked` accuracy of the cold start and of each RL arm."""
        models = {"cold start": ["keys-sft"]}
        models |= {LABELS.get(a, a): self.per_seed("keys-{arm}-s{seed}", a) for a in self.arms}
        return self.accuracy_table(models, {"`keyed`": keyed_item, "`marked`": marked_item})

    def rl_dir(self, arm: str, seed: int) -> Path:
        return self.root / "rl" / f"{arm}-s{seed}"

    def hgce_mechanism(self) -> list[str]:
        """Hinted success, rescues and log-ratios per run; the sampled decision over steps."""
        rows = [self.hgce_row(arm, seed) for arm in self.arms for seed in range(self.seeds)]
        header = ["arm", "seed", "hinted groups", "hinted success", "rescued groups"]
        header += ["mean log r (hinted)", "clipped +/−", "P(key-first) held-out", "acc sampled"]
        return [
            "Mechanism, per run: hinted groups and their per-rollout success (`hgce.jsonl`; a "
            "group with a right rollout is rescued), mean log-ratio on hinted rows "
            "(`rl/hint_log_ratio`) and its clipped shares, and the held-out sampled P(key-first) "
            "and accuracy (`eval/keyed-sampled-*`):",
            "",
            *markdown_table(header, rows),
            "",
            *self.decision_table(),
            "",
        ]

    def hgce_row(self, arm: str, seed: int) -> list[str]:
        log = self.rl_dir(arm, seed) / HGCE_LOG
        groups = list(read_jsonl(log))
        steps = list(read_jsonl(self.rl_dir(arm, seed) / METRICS_FILE))
        rollouts = [bool(c) for g in groups for c in g.get("correct", [])]
        rescued = sum(any(g.get("correct", [])) for g in groups)
        sampled = sampled_run(self.eval_dir(f"keyed-sampled-{arm}-s{seed}"), "keyed")
        if not steps:
            return [LABELS.get(arm, arm), str(seed), "not run", *[""] * 6]
        clipped = "/".join(num(finite_mean(steps, f"rl/hint_clipped_{s}")) for s in ("pos", "neg"))
        return [
            LABELS.get(arm, arm),
            str(seed),
            str(len(groups)) if log.exists() else "—",
            num(sum(rollouts) / len(rollouts) if rollouts else None),
            str(rescued) if log.exists() else "—",
            num(finite_mean(steps, "rl/hint_log_ratio"), "{:+.3f}"),
            clipped,
            num(sampled.p_key_first),
            num(sampled.success),
        ]

    def decision_table(self) -> list[str]:
        """`rl/decision_rate` (sampled share of unhinted keyed rollouts whose first crop is the
        key) averaged over windows of WINDOW training steps, per arm and seed."""
        logs = {
            (arm, seed): list(read_jsonl(self.rl_dir(arm, seed) / METRICS_FILE))
            for arm in self.arms
            for seed in range(self.seeds)
        }
        last = max((int(r.get("step", 0)) for log in logs.values() for r in log), default=0)
        windows = range(math.ceil(last / WINDOW))
        spans = (f"steps {w * WINDOW + 1}-{min((w + 1) * WINDOW, last)}" for w in windows)
        header = ["arm", "seed", *spans]
        rows = [
            [LABELS.get(arm, arm), str(seed), *(num(self.window_rate(log, w)) for w in windows)]
            for (arm, seed), log in logs.items()
            if log
        ]
        title = "Sampled P(key-first) in training (`rl/decision_rate`), mean per step window:"
        if not rows:
            return [title + " not run."]
        return [title, "", *markdown_table(header, rows)]

    @staticmethod
    def window_rate(log: Sequence[Mapping], window: int) -> float:
        rows = [r for r in log if (max(int(r.get("step", 1)), 1) - 1) // WINDOW == window]
        return finite_mean(rows, "rl/decision_rate")

    # -- (a) ReVuE -----------------------------------------------------------------------------
    def revue_lines(self) -> dict[str, Line]:
        """The comparisons (a) rests on, by role."""

        revue, vanilla = self.told_arm(REVUE), self.told_arm(VANILLA)
        one_hop = [self.opd_arm(v) for v in (REVUE, VANILLA)]
        return {
            "primary": self.line("Primary, `told`", revue, vanilla),
            "content": self.line("Content control, `told`", revue, self.told_arm(SHUFFLED)),
            "red": self.line(
                "Red keys (the teacher errs)",
                self.told_arm(REVUE, red_item),
                self.told_arm(VANILLA, red_item),
            ),
            "plain": self.line(
                "Plain keys (no gain expected)",
                self.told_arm(REVUE, grey_item),
                self.told_arm(VANILLA, grey_item),
            ),
            "one_hop": self.line("1-hop `synth_demo` (no gain expected)", *one_hop),
        }

    def opd_arm(self, variant: str) -> ArmRuns:
        """A variant's held-out 1-hop `synth_demo` runs (`eval/opd-*`)."""
        names = self.per_seed("opd-{arm}-s{seed}", variant)
        return self.arm(LABELS.get(variant, variant), names, every)

    def control_shift(self) -> float | None:
        """Accuracy of the teacher = student control minus the student's, on `told`."""
        if not (self.done("told-opd-control-s0") and self.done("told-student")):
            return None
        control = accuracy(self.eval_dir("told-opd-control-s0"))
        student = accuracy(self.eval_dir("told-student"))
        return None if control is None or student is None else control - student

    def revue(self) -> list[str]:
        lines = self.revue_lines()
        shift = self.control_shift()
        evidence = RevueEvidence(
            gates=self.revue_gates,
            primary=lines["primary"].comparison,
            content=lines["content"].comparison,
            red=lines["red"].comparison.difference,
            plain=lines["plain"].comparison.difference,
            control_shift=shift,
        )
        control = "not run" if shift is None else f"{shift:+.3f}"
        body = [line for role in lines.values() for line in self.render_line(role)]
        return [
            "### 4.4 (a) ReVuE vs vanilla OPD",
            "",
            "Greedy held-out accuracy in tool mode (180 `told` items, half with red keys).",
            "",
            *self.told_table(),
            *body,
            f"- Control: teacher = student − student on `told`: {control} (0 exactly when the "
            "machinery is inert).",
            *self.refused(),
            "",
            *self.revue_mechanism(),
            render_verdict(revue_verdict(evidence)),
            "",
        ]

    def told_table(self) -> list[str]:
        """`told` accuracy of the teacher, the student and each variant, by key colour."""
        models = {"teacher": ["told-teacher"], "student (before)": ["told-student"]}
        for v in self.variants:
            seeds = 1 if v == CONTROL else None
            models[LABELS.get(v, v)] = self.per_seed("told-opd-{arm}-s{seed}", v, seeds)
        columns = {"`told`": told_item, "red keys": red_item, "plain keys": grey_item}
        return self.accuracy_table(models, columns)

    def accuracy_table(
        self, models: Mapping[str, Sequence[str]], columns: Mapping[str, Callable[[Mapping], bool]]
    ) -> list[str]:
        """Per model (its eval runs), pooled accuracy with its 95% interval per column (the
        records `columns` keeps); "not run" for a model without a finished run."""
        rows = []
        for label, names in models.items():
            cells = []
            for keep in columns.values():
                runs = self.arm(label, names, keep).runs
                cells.append(fmt_accuracy(runs, self.n_resamples) if runs else "not run")
            rows.append([label, *cells])
        return [*markdown_table(["model", *columns], rows), ""]

    def opd_dir(self, variant: str, seed: int) -> Path:
        return self.root / "opd" / f"{variant}-s{seed}"

    def opd_runs(self, variant: str) -> list[Path]:
        seeds = 1 if variant == CONTROL else self.seeds
        return [self.opd_dir(variant, s) for s in range(seeds)]

    def refused(self) -> list[str]:
        """One line per OPD run the teacher check refused (it has no eval)."""
        paths = [p / REFUSED for v in self.variants for p in self.opd_runs(v)]
        return [
            f"- `opd/{p.parent.name}` refused: {p.read_text().strip()}" for p in paths if p.exists()
        ]

    def revue_mechanism(self) -> list[str]:
        rows = [self.variant_row(v) for v in self.variants]
        header = ["variant", "decisive impact share", "High share of uniform loss"]
        header += ["complete", "diagnosis-only", "none"]
        return [
            "Mechanism, per variant over its runs: mean share of a wrong rollout's impact at its "
            "decisive token (`revue/decisive_impact_share`), the High group's share of the "
            "uniform loss (`revue/high_share_uniform`: the room the weights had), and reflection "
            "coverage of the rollout slots (`beacon revue analyze`):",
            "",
            *markdown_table(header, rows),
            "",
            *self.stage_table(),
            "",
        ]

    def variant_row(self, variant: str) -> list[str]:
        steps = [r for run in self.opd_runs(variant) for r in read_jsonl(run / METRICS_FILE)]
        if not steps:
            return [LABELS.get(variant, variant), "not run", "", "", "", ""]
        coverage: Counter[str] = Counter()
        for run in self.opd_runs(variant):
            if (run / METRICS_FILE).exists():
                coverage.update(analyze_run(run).coverage)
        slots = sum(coverage.values())
        complete, diagnosis = coverage["complete"], coverage["diagnosis_only"]
        shares = [f"{n}/{slots}" if slots else NO_CRITIC for n in (complete, diagnosis)]
        return [
            LABELS.get(variant, variant),
            num(finite_mean(steps, "revue/decisive_impact_share")),
            num(finite_mean(steps, "revue/high_share_uniform")),
            *shares,
            f"{slots - complete - diagnosis}/{slots}" if slots else NO_CRITIC,
        ]

    def stage_table(self) -> list[str]:
        """The critic's stage per rollout, by item kind, from every accepted exchange
        (`critic.jsonl`; a step redone after a resume counts again)."""
        rows = []
        for variant in self.variants:
            counts: dict[str, Counter[str]] = {}
            for run in self.opd_runs(variant):
                for exchange in read_jsonl(run / CRITIC_LOG):
                    kind = counts.setdefault(item_kind(exchange), Counter())
                    kind.update(exchange_stages(exchange))
            rows += [
                [LABELS.get(variant, variant), kind, *(str(c[s]) for s in STAGES)]
                for kind, c in sorted(counts.items())
            ]
        title = (
            "Critic stage per rollout, by item kind (red `told` rollouts should be mostly ACQUIRE):"
        )
        if not rows:
            return [title + " no critic exchanges."]
        return [title, "", *markdown_table(["variant", "items", *STAGES], rows)]


def keys_sections(
    root: Path,
    seeds: int,
    arms: Sequence[str],
    variants: Sequence[str],
    n_resamples: int,
    knobs: Mapping[str, object] | None = None,
) -> list[str]:
    """Demo II's section of `report.md` as markdown lines, from the demo folder `root`: RL arms
    `arms` and OPD variants `variants` over seeds 0..`seeds` − 1 (the control: seed 0 only),
    intervals from `n_resamples` paired bootstrap resamples; `knobs`: the task's settings the
    rules were fixed with, printed beside them."""
    return KeysReport(Path(root), seeds, arms, variants, n_resamples, knobs or {}).sections()
