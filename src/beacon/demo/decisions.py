"""Demo II's pre-registered decisions: premise gates and verdict rules (demo2_design §2.7, §3.3,
§4.2).

The rules live here, as code and as text (`render_rules`), so the report prints them before any
result and no rule can be bent to fit one. Every threshold is a named constant that cites the
design section it comes from. The inputs are dataclasses the demo fills from its runs
(`RevueEvidence`, `HgceEvidence`); the rules are plain functions of them.

- **Gates** (§2.7, `beacon.demo.gates`) are measured on the cold start before any compared arm
  runs. A claim whose gate failed is "not tested: premise failed (G-R1 a0 = 0.62, aR = 0.91)",
  never "not reproduced": a method cannot fail a test it was not given. A premise that was not
  measured counts as failed.
- **Verdicts** (§4.2) are decided on the primary paired difference Δ (`beacon.demo.stats`) and
  its 95% interval, then on the content control and the mechanism checks; the first rule that
  matches wins, in the order `render_rules` prints. An interval that contains 0 is no evidence
  either way, which is not evidence of equality: only an upper bound below the smallest effect
  of interest (+0.05) says "not reproduced", and "≈" of a control means the same thing.
- **Seeds** (§3.3): every pooled interval comes with each arm's per-seed means and the exact
  permutation p on them (`Comparison`, `render_seed_table`); the power arithmetic that sized
  the runs is `beacon.demo.power`.

Where the design leaves a choice open, this module takes one and says so:

1. A Δ interval inside (0, +0.05) is "not reproduced": it rules out every effect of interest,
   though it found a small one (the reason says so).
2. (a) "the control stayed at the student" blocks only "reproduced" (§4.2 lists it there); a run
   whose control moved is inconclusive where it would have been reproduced.
3. (b) hint reliance and the `marked` drop are read on their points, as (a)'s strata are (§4.2
   says "point estimates" there); either failing makes a gain "not the paper's mechanism".
4. (b) "per-seed table agreeing" (§4.2, 3 seeds) is every HGCE seed above every
   uninformative-hint seed: the exact permutation p at its smallest, 1/20 for 3 vs 3.
5. (b) "a P(key-first) shift" is the interval of HGCE − accuracy-only's sampled P(key-first)
   above 0; "no shift" needs that interval measured. With 3 seeds it errs narrow (§3.3), which
   errs toward "inconclusive".

What is not covered: the two primary tests are 95% each (§4.2: the strata and controls are
supporting evidence, not extra chances to win), and a 3-seed interval errs narrow when seeds
near a take-off are bimodal (§3.3): read (b) by its seed table too.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from beacon.demo.gates import (
    EPS,
    GATE_PREMISES,
    KEY_FIRST_WINDOW,
    Gate,
    HgcePremises,
    RevuePremises,
    hgce_gates,
    measured,
    revue_gates,
)
from beacon.demo.stats import Interval, paired_difference, variant_metrics
from beacon.report.markdown import format_interval, markdown_table

SMALLEST_EFFECT = 0.05
"""§4.2: the smallest effect of interest. A CI upper bound below it is "not reproduced"."""
MAX_MARKED_DROP = 0.05
"""§4.1, §4.2 (b): accuracy-only − HGCE on `marked` at most this (key-first not over-applied)."""
FEW_SEEDS = 3
"""§4.2 (b): at this many seeds or fewer, the seed table may stand in for the content CI."""
CONTROL_TOLERANCE = 1e-9
"""§4.1 (a): teacher = student "stays at the student exactly"; float error only."""


# -- comparisons and seed tables ---------------------------------------------------------------
def permutation_p(seeds_a: Sequence[float], seeds_b: Sequence[float]) -> float:
    """Exact one-sided p of mean(A) > mean(B) over the seed means (§3.3).

    Every split of the pooled seed means into groups of the two sizes is equally likely when
    the variants do not differ; p is the share of splits whose A-mean minus B-mean is at least
    the observed one (ties count). That difference grows with A's sum (the total is fixed), so
    the sum is the statistic. The smallest p is 1/C(S_a + S_b, S_a): 1/20 for 3 vs 3, 1/252 for
    5 vs 5. NaN without seeds on both sides.
    """
    if not seeds_a or not seeds_b:
        return math.nan
    pooled = [*seeds_a, *seeds_b]
    observed = sum(seeds_a)
    splits = list(itertools.combinations(pooled, len(seeds_a)))
    return sum(sum(split) >= observed - EPS for split in splits) / len(splits)


@dataclass(frozen=True)
class Comparison:
    """A − B: the pooled paired difference (`beacon.demo.stats.paired_difference`) beside each
    arm's per-seed means (seeds are not paired across arms: listed, never subtracted)."""

    label_a: str
    label_b: str
    difference: Interval
    seeds_a: tuple[float, ...] = ()
    seeds_b: tuple[float, ...] = ()

    @property
    def text(self) -> str:
        """`ReVuE − vanilla +0.15 [+0.07, +0.23]`."""
        return f"{self.label_a} − {self.label_b} {signed(self.difference)}"

    @property
    def p_value(self) -> float:
        """The exact one-sided permutation p on the seed means (`permutation_p`)."""
        return permutation_p(self.seeds_a, self.seeds_b)

    @property
    def seeds_separated(self) -> bool:
        """Every A seed above every B seed (the permutation p at its smallest)."""
        return bool(self.seeds_a and self.seeds_b) and min(self.seeds_a) > max(self.seeds_b)


def compare(
    label_a: str,
    runs_a: Sequence[Sequence[Mapping]],
    label_b: str,
    runs_b: Sequence[Sequence[Mapping]],
    metric: str = "acc_tool",
    n_resamples: int = 1000,
    seed: int = 0,
) -> Comparison:
    """A − B from each seed's `samples.jsonl` records: the demo's paired interval
    (`paired_difference`) and each seed's own point (`variant_metrics` of that seed alone)."""
    difference = paired_difference(runs_a, runs_b, metric, n_resamples, seed)
    seeds_a, seeds_b = (
        tuple(variant_metrics([records], 0)[metric].point for records in runs)
        for runs in (runs_a, runs_b)
    )
    return Comparison(label_a, label_b, difference, seeds_a, seeds_b)


def signed(interval: Interval) -> str:
    """`+0.15 [+0.07, +0.23]`."""
    return format_interval(*interval, spec="{:+.2f}", undefined="n/a")


def render_seed_table(comparison: Comparison) -> list[str]:
    """Per-seed means of both arms beside the pooled interval and the permutation p (§3.3)."""
    c = comparison

    def cell(arm: tuple[float, ...], seed: int) -> str:
        return f"{arm[seed]:.2f}" if seed < len(arm) else "—"

    n_seeds = max(len(c.seeds_a), len(c.seeds_b))
    rows = [[str(j), cell(c.seeds_a, j), cell(c.seeds_b, j)] for j in range(n_seeds)]
    lines = markdown_table(["seed", c.label_a, c.label_b], rows)
    p = c.p_value
    p_text = "n/a" if math.isnan(p) else f"{p:.3f} (smallest possible {smallest_p(c):.3f})"
    return [*lines, "", f"Pooled {c.text}; exact one-sided permutation p on seed means {p_text}."]


def smallest_p(comparison: Comparison) -> float:
    """1/C(S_a + S_b, S_a): the permutation p of fully separated seeds."""
    a, b = len(comparison.seeds_a), len(comparison.seeds_b)
    return 1 / math.comb(a + b, a)


# -- verdicts ----------------------------------------------------------------------------------
class Outcome(str, Enum):
    """The verdicts of §4.2."""

    NOT_TESTED = "not tested"
    REPRODUCED = "reproduced"
    NOT_REPRODUCED = "not reproduced"
    OPPOSITE = "opposite"
    OTHER_MECHANISM = "reproduced, but not the paper's mechanism"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Verdict:
    """One claim's verdict and a one-line reason that quotes the numbers it rests on."""

    claim: str
    outcome: Outcome
    reason: str

    @property
    def line(self) -> str:
        """`not tested: premise failed (G-R1 a0 = 0.62, aR = 0.91)`."""
        return f"{self.outcome.value}: {self.reason}"


@dataclass(frozen=True)
class RevueEvidence:
    """What (a)'s verdict rests on (§4.2). Differences are greedy held-out accuracy, tool mode."""

    gates: Sequence[Gate]
    primary: Comparison
    """ReVuE − vanilla OPD on `told`."""
    content: Comparison
    """ReVuE − shuffled reflection on `told`."""
    red: Interval
    """ReVuE − vanilla on red-key `told` items (the stratum where the teacher errs)."""
    plain: Interval
    """ReVuE − vanilla on plain-key `told` items (no gain expected)."""
    control_shift: float | None
    """Teacher = student control − student on `told`: exactly 0 when the machinery is inert."""


@dataclass(frozen=True)
class HgceEvidence:
    """What (b)'s verdict rests on (§4.2). Differences are greedy held-out accuracy, tool mode."""

    gates: Sequence[Gate]
    primary: Comparison
    """HGCE − accuracy-only on unhinted `keyed`."""
    content: Comparison
    """HGCE − uninformative hint on unhinted `keyed`."""
    hint_reliance: Interval
    """HGCE − accuracy-only, unhinted, on the items HGCE's hinted groups rescued."""
    marked_drop: Interval
    """Accuracy-only − HGCE on `marked` (positive: HGCE lost accuracy there)."""
    key_first_shift: Interval
    """HGCE − accuracy-only, sampled P(key-first) on unhinted `keyed`."""


def screen(claim: str, gates: Sequence[Gate], primary: Comparison) -> Verdict | None:
    """The rules both claims open with: not tested (a failed or unmeasured premise, or no
    interval), then opposite. None when neither applies."""
    failed = [g for g in gates if not g.passed]
    if failed or not gates:
        named = "; ".join(f"{g.name} {g.value}" for g in failed) or "no gate was measured"
        return Verdict(claim, Outcome.NOT_TESTED, f"premise failed ({named})")
    d = primary.difference
    if math.isnan(d.point):
        return Verdict(claim, Outcome.NOT_TESTED, f"{primary.text}: undefined (no items)")
    if math.isnan(d.low) or math.isnan(d.high):
        return Verdict(claim, Outcome.NOT_TESTED, f"{primary.text}: no interval (bootstrap 0)")
    if d.high < 0:
        return Verdict(claim, Outcome.OPPOSITE, f"{primary.text}: the whole interval is below 0")
    return None


def below_interest(primary: Comparison, smallest_effect: float) -> str:
    """The reason of "not reproduced": the upper bound rules out every effect of interest."""
    small = f" (a gain, but below {smallest_effect:+.2f})" if primary.difference.low > 0 else ""
    return f"{primary.text}: upper bound below the smallest effect of interest{small}"


def undecided(primary: Comparison) -> str:
    """The reason of an inconclusive primary: the effects the run could not rule out."""
    d = primary.difference
    p = primary.p_value
    seeds = "" if math.isnan(p) else f" (seed permutation p = {p:.3f})"
    return (
        f"no evidence either way: {primary.text}{seeds}; the run could not rule out "
        f"Δ ∈ [{d.low:+.2f}, {d.high:+.2f}]"
    )


def strata_located(red: Interval, plain: Interval) -> bool | None:
    """§4.2 (a): the red Δ exceeds the plain Δ (points), and the plain interval contains 0 or
    its point is below half the red one. None when a stratum is undefined."""
    if not measured(red.point, plain.point):
        return None
    return red.point > plain.point and (not plain.excludes_zero or plain.point < red.point / 2)


def revue_verdict(e: RevueEvidence, smallest_effect: float = SMALLEST_EFFECT) -> Verdict:
    """(a) ReVuE vs vanilla OPD by the rules of §4.2, first match wins (`render_rules`)."""
    claim = "ReVuE vs vanilla OPD"
    early = screen(claim, e.gates, e.primary)
    if early:
        return early
    d, content = e.primary.difference, e.content.difference
    if d.high < smallest_effect:
        return Verdict(claim, Outcome.NOT_REPRODUCED, below_interest(e.primary, smallest_effect))
    if d.low <= 0:
        return Verdict(claim, Outcome.INCONCLUSIVE, undecided(e.primary))
    gain = f"{e.primary.text} > 0"
    strata = f"red {signed(e.red)} vs plain {signed(e.plain)}"
    if content.high < smallest_effect:
        why = f"{gain}, but {e.content.text}: shuffled reflections do as well"
        return Verdict(claim, Outcome.OTHER_MECHANISM, why)
    located = strata_located(e.red, e.plain)
    if located is False:
        why = f"{gain}, but the gain is not located on red keys ({strata})"
        return Verdict(claim, Outcome.OTHER_MECHANISM, why)
    if located is None:
        why = f"{gain}, but a stratum is undefined ({strata})"
        return Verdict(claim, Outcome.INCONCLUSIVE, why)
    if not content.low > 0:
        why = f"{gain}, but {e.content.text} reaches 0: content and format not told apart"
        return Verdict(claim, Outcome.INCONCLUSIVE, why)
    shift = e.control_shift
    if not measured(shift) or abs(shift) > CONTROL_TOLERANCE:
        moved = "was not run" if not measured(shift) else f"moved off the student by {shift:+.3f}"
        why = f"{gain}, but the teacher = student control {moved}: the gain cannot be credited"
        return Verdict(claim, Outcome.INCONCLUSIVE, why)
    why = f"{gain}; {e.content.text} > 0; {strata}; the control stayed at the student"
    return Verdict(claim, Outcome.REPRODUCED, why)


def content_shown(primary: Comparison, content: Comparison) -> tuple[bool, str]:
    """§4.2 (b): HGCE − uninformative CI > 0, or at ≤ FEW_SEEDS seeds its point ≥ ½ Δ with
    every HGCE seed above every uninformative seed. (shown, how)."""
    if content.difference.low > 0:
        return True, f"{content.text} > 0"
    n_seeds = max(len(content.seeds_a), len(content.seeds_b))
    half = content.difference.point >= primary.difference.point / 2
    if 0 < n_seeds <= FEW_SEEDS and half and content.seeds_separated:
        return True, f"{content.text}, point ≥ ½ Δ and every seed above (p = {content.p_value:.3f})"
    return False, content.text


def hgce_verdict(e: HgceEvidence, smallest_effect: float = SMALLEST_EFFECT) -> Verdict:
    """(b) HGCE vs accuracy-only by the rules of §4.2, first match wins (`render_rules`)."""
    claim = "HGCE vs accuracy-only"
    early = screen(claim, e.gates, e.primary)
    if early:
        return early
    d = e.primary.difference
    shift = f"P(key-first) shift {signed(e.key_first_shift)}"
    if d.high < smallest_effect:
        if e.key_first_shift.low > 0 or not measured(e.key_first_shift.low):
            late = "the take-off may lie past the run"
            why = f"{e.primary.text} at the end, but {shift}: {late}"
            if not measured(e.key_first_shift.low):
                why = f"{e.primary.text} at the end, but the P(key-first) shift was not measured"
            return Verdict(claim, Outcome.INCONCLUSIVE, why)
        why = f"{below_interest(e.primary, smallest_effect)}; no {shift}"
        return Verdict(claim, Outcome.NOT_REPRODUCED, why)
    if d.low <= 0:
        return Verdict(claim, Outcome.INCONCLUSIVE, undecided(e.primary))
    gain = f"{e.primary.text} > 0 (seed p = {e.primary.p_value:.3f})"
    reliance, drop = e.hint_reliance.point, e.marked_drop.point
    if e.content.difference.high < smallest_effect:
        why = f"{gain}, but {e.content.text}: the uninformative hint does as well"
        return Verdict(claim, Outcome.OTHER_MECHANISM, why)
    if measured(reliance) and reliance <= 0:
        why = f"{gain}, but on its rescued items HGCE − accuracy-only {reliance:+.2f}: no transfer"
        return Verdict(claim, Outcome.OTHER_MECHANISM, why)
    if measured(drop) and drop > MAX_MARKED_DROP + EPS:
        why = f"{gain}, but `marked` dropped {drop:.2f} > {MAX_MARKED_DROP:.2f}: key-first overused"
        return Verdict(claim, Outcome.OTHER_MECHANISM, why)
    if not measured(reliance, drop):
        why = f"{gain}, but hint reliance or the `marked` drop was not measured"
        return Verdict(claim, Outcome.INCONCLUSIVE, why)
    shown, how = content_shown(e.primary, e.content)
    if not shown:
        why = f"{gain}, but {how} reaches 0: the hint's content and extra rollouts not told apart"
        return Verdict(claim, Outcome.INCONCLUSIVE, why)
    why = f"{gain}; {how}; hint reliance {reliance:+.2f}; `marked` drop {drop:+.2f}"
    return Verdict(claim, Outcome.REPRODUCED, why)


# -- rendering ---------------------------------------------------------------------------------
def render_verdict(verdict: Verdict) -> str:
    """`**Verdict, ReVuE vs vanilla OPD**: not tested: premise failed (G-R1 a0 = 0.62, …)`."""
    return f"**Verdict, {verdict.claim}**: {verdict.line}"


def render_rules(smallest_effect: float = SMALLEST_EFFECT) -> list[str]:
    """The gates and verdict rules as markdown, printed before any result (§4.2)."""
    low, high = KEY_FIRST_WINDOW
    sesoi = f"{smallest_effect:+.2f}"
    gates = hgce_gates(HgcePremises(None, None, None, None, None)) + revue_gates(
        RevuePremises(None, None, None, None, None, None, None)
    )
    table = markdown_table(
        ["gate", "premise", "target"], [[g.name, GATE_PREMISES[g.name], g.target] for g in gates]
    )
    return [
        "Pre-registered rules (demo2_design §2.7, §4.2; `beacon.demo.decisions`), fixed before "
        "any compared arm ran. Premise gates, measured on the cold start:",
        "",
        *table,
        "",
        "Primary endpoints, greedy held-out accuracy in tool mode, 95% paired bootstrap interval "
        "(items drawn once for both arms, each arm's seeds within it):",
        "- (a) Δ = ReVuE − vanilla OPD on `told`; content control ReVuE − shuffled reflection; "
        "strata red and plain keys.",
        "- (b) Δ = HGCE − accuracy-only on unhinted `keyed`; content control HGCE − "
        "uninformative hint.",
        f"Smallest effect of interest {sesoi}. The first rule that matches decides:",
        "1. **not tested**: a premise gate of the claim failed or was not measured (named with "
        'its value), or Δ has no interval. Never "not reproduced".',
        "2. **opposite**: Δ's interval lies below 0.",
        f"3. **not reproduced**: Δ's upper bound < {sesoi}; for (b) only with a measured "
        "HGCE − accuracy-only sampled P(key-first) interval that is not above 0, else "
        "inconclusive.",
        "4. Δ's interval reaches 0 (and its upper bound ≥ the smallest effect): **inconclusive**, "
        "naming the effects the run could not rule out.",
        f"5. **reproduced, but not the paper's mechanism**: Δ > 0 but the content control's "
        f"upper bound < {sesoi} (shuffled reflection / uninformative hint does as well); (a) the "
        "gain is not located on red keys (red Δ ≤ plain Δ, or plain's interval excludes 0 with "
        "its point ≥ ½ the red one); (b) hint reliance (HGCE − accuracy-only on HGCE's rescued "
        f"items, point) ≤ 0, or the `marked` drop > {MAX_MARKED_DROP:.2f}.",
        "6. **reproduced**: Δ > 0 and the content control > 0; (a) the gain located on red keys "
        "and the teacher = student control stayed at the student exactly; (b) at ≤ "
        f"{FEW_SEEDS} seeds the content control may instead have its point ≥ ½ Δ with every "
        "HGCE seed above every uninformative-hint seed, and hint reliance > 0 with the `marked` "
        f"drop ≤ {MAX_MARKED_DROP:.2f}.",
        "7. **inconclusive** otherwise (a content control reaching 0, an undefined stratum, a "
        "control that moved, a check not measured). No evidence either way is not evidence of "
        "equality. Per-seed means and the exact one-sided permutation p on them stand beside "
        "every pooled interval.",
        f"Gate G-H1's window {low:.2f}–{high:.2f} is where HGCE's ratio can move the decision "
        "(§3.2). Two primary tests at 95% each; strata and controls are supporting evidence.",
    ]
