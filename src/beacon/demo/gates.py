"""Demo II's premise gates (demo2_design §2.7): measured on the cold start before any compared arm.

Each gate is data: its measured value(s) as text, its target, and whether it passed. Every
threshold is a named constant that cites the design section it comes from. A premise that was not
measured (None or NaN) fails its gate, so a missing measurement can never let a claim be judged
(`beacon.demo.decisions`: a failed gate makes the claim "not tested", never "not reproduced").
Bounds are inclusive, with float slack `EPS`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from beacon.report.markdown import markdown_table

KEY_FIRST_WINDOW = (0.02, 0.10)
"""G-H1 (§2.7, §3.2): unhinted `keyed` sampled P(key-first) p0, the window where HGCE's ratio can
move the decision (below it neither arm samples the key; above it both take off)."""
MAX_PASS_AT_8 = 0.75
"""G-H2 (§2.7): unhinted `keyed` pass@8 on RL items at most this (≥ 25% all-wrong groups, ≥ 20
of a run's 80 `keyed` groups hinted). The design's 0.5 cannot be met by this task: a guess among
its 8 cells is right 1/8 of the time, so pass@8 is 1 - (7/8)^8 = 0.66 with no skill at all (the
pilot measured 0.57-0.70); it was changed on the pilot, before any compared arm."""
MIN_HINTED_SUCCESS = 0.5
"""G-H3 (§2.7): hinted `keyed` per-rollout success at least this (not luck: `search` is 0.11)."""
MIN_HINTED_LIFT = 3.0
"""G-H3 (§2.7): hinted per-rollout success at least this many times the unhinted one."""
MIN_HINTED_SPLIT = 0.5
"""G-H4: of the hinted `keyed` items (8 rollouts each), the share whose rollouts split on the
decisive step (some crop the key first, some do not), at least this. A hinted group trains with
group-relative advantages, which sum to 0 over the group (beacon.md §4); a step that every
rollout took from the same prefix (the first crop) therefore gets no net push, whatever the
outcomes: only a group in which rollouts that took the key and rollouts that did not got
different rewards moves P(key first | no hint). Mixed outcomes alone are not enough (a group
that always takes the key and sometimes misreads pushes the reading, not the step). Added after
the first two full demos: the cold start followed the hint 0.98-0.99 of the time, so most
hinted groups were all right and the rest split on reading only."""
MAX_RED_A0 = 0.4
"""G-R1 (§2.7, §3.1): the teacher's decisive-token probe on red `told` rollouts without the
reflection, a0, at most this (the teacher errs there)."""
MIN_RED_AR = 0.85
"""G-R1 (§2.7): the same probe with the reflection, aR, at least this (the reflection fixes it)."""
MIN_TEACHER_PLAIN = 0.85
"""G-R2 (§2.7): the teacher without a reflection is right on plain keys (the negative stratum:
no room expected there) at least this often, on its greedy held-out `told` items with a grey
key. Not the probe's plain stratum, as the design had it: the probe sees only the student's
wrong rollouts, and on plain keys a good student gives almost none (3 in a full demo)."""
MIN_GROUNDING = 0.9
"""G-R3 (§2.7): the reflection-conditioned teacher agrees with the student's own crop."""
MIN_FOLLOWS_PROCEDURE = 0.9
"""G-R4 (§2.7): the student follows the `told` procedure at least this often."""
MIN_TEACHER_MARGIN = 0.15
"""G-R4 (§2.7): student `told` accuracy at most the teacher's minus this (room to distil)."""
EPS = 1e-9
"""Float slack of the gates' inclusive bounds: 0.6 measured as 0.6000000001 still meets ≥ 0.6."""
GATE_PREMISES = {
    "G-H1": "unhinted `keyed`: sampled P(key-first) p0",
    "G-H2": "unhinted `keyed` pass@8 on RL items",
    "G-H3": "`keyed` per-rollout success, hinted vs unhinted",
    "G-H4": "hinted `keyed` groups of 8 split on the first crop (key or not): a push on that step",
    "G-R1": "teacher's decisive-token probe on red `told`: without (a0) / with (aR) reflection",
    "G-R2": "teacher's greedy held-out accuracy on plain-key `told`, without reflection",
    "G-R3": "grounding: with the reflection, the teacher still answers the cropped digit",
    "G-R4": "student follows the `told` procedure; student vs teacher `told` accuracy",
}
"""What each gate measures (§2.7), for the rules and premise tables."""


@dataclass(frozen=True)
class Gate:
    """One premise gate of §2.7: its measured value(s) as text, its target, and the outcome."""

    name: str
    value: str
    target: str
    passed: bool


@dataclass(frozen=True)
class HgcePremises:
    """(b)'s premise values, measured on the cold start before any compared arm (§2.7)."""

    p_key_first: float | None
    """Unhinted `keyed`, sampled: share of rollouts whose first crop is the key (G-H1)."""
    pass_at_8: float | None
    """Unhinted `keyed` RL items: share with at least one right rollout of 8 (G-H2)."""
    hinted_success: float | None
    """Hinted `keyed`: per-rollout success, sampled (G-H3)."""
    unhinted_success: float | None
    """Unhinted `keyed`: per-rollout success, sampled (G-H3)."""
    hinted_mixed: float | None = None
    """Hinted `keyed`: share of items whose 8 rollouts are neither all right nor all wrong."""
    hinted_split: float | None = None
    """Hinted `keyed`: share of items whose 8 rollouts split on the first crop, some the key
    and some not (G-H4)."""


@dataclass(frozen=True)
class RevuePremises:
    """(a)'s premise values, measured on the cold start before any compared arm (§2.7)."""

    a0_red: float | None
    """Red-key `told` student rollouts: share where the teacher's argmax at the crop-2
    divergence token is right without the reflection (G-R1; §2.5 decisive-token probe)."""
    ar_red: float | None
    """The same with the reflection in its context (G-R1)."""
    teacher_plain: float | None
    """Teacher's greedy held-out accuracy on plain-key `told` items, no reflection (G-R2)."""
    grounding: float | None
    """Rollouts whose cell crop shows digit d ≠ the answer: share where the teacher's argmax
    at the answer position is still d with the reflection (G-R3; §2.5 grounding gate)."""
    follows_procedure: float | None
    """Student on `told`: share of episodes that crop the key, write the note, then crop (G-R4)."""
    student_told: float | None
    """Student's greedy `told` accuracy (G-R4)."""
    teacher_told: float | None
    """Teacher's greedy `told` accuracy (G-R4)."""


def measured(*values: float | None) -> bool:
    """True when every value was measured (not None, not NaN)."""
    return all(v is not None and not math.isnan(v) for v in values)


def values_text(**values: float | None) -> str:
    """`a0 = 0.62, aR = 0.91`; an unmeasured value reads `not measured`."""
    return ", ".join(
        f"{name} = {value:.2f}" if measured(value) else f"{name} = not measured"
        for name, value in values.items()
    )


def hgce_gates(p: HgcePremises) -> list[Gate]:
    """G-H1…G-H3 of §2.7 and G-H4 on `p`; an unmeasured premise fails its gate."""
    low, high = KEY_FIRST_WINDOW
    hinted, unhinted = p.hinted_success, p.unhinted_success
    return [
        Gate(
            "G-H1",
            values_text(p0=p.p_key_first),
            f"{low:.2f} ≤ p0 ≤ {high:.2f}",
            measured(p.p_key_first) and low - EPS <= p.p_key_first <= high + EPS,
        ),
        Gate(
            "G-H2",
            values_text(**{"pass@8": p.pass_at_8}),
            f"pass@8 ≤ {MAX_PASS_AT_8:.2f}",
            measured(p.pass_at_8) and p.pass_at_8 <= MAX_PASS_AT_8 + EPS,
        ),
        Gate(
            "G-H3",
            values_text(hinted=hinted, unhinted=unhinted),
            f"hinted ≥ {MIN_HINTED_SUCCESS:.2f} and ≥ {MIN_HINTED_LIFT:g}× unhinted",
            measured(hinted, unhinted)
            and hinted >= MIN_HINTED_SUCCESS - EPS
            and hinted >= MIN_HINTED_LIFT * unhinted - EPS,
        ),
        Gate(
            "G-H4",
            values_text(split=p.hinted_split, mixed=p.hinted_mixed),
            f"split ≥ {MIN_HINTED_SPLIT:.2f}",
            measured(p.hinted_split) and p.hinted_split >= MIN_HINTED_SPLIT - EPS,
        ),
    ]


def revue_gates(p: RevuePremises) -> list[Gate]:
    """G-R1…G-R4 of §2.7 on `p`; an unmeasured premise fails its gate."""
    student, teacher = p.student_told, p.teacher_told
    return [
        Gate(
            "G-R1",
            values_text(a0=p.a0_red, aR=p.ar_red),
            f"a0 ≤ {MAX_RED_A0:.2f} and aR ≥ {MIN_RED_AR:.2f}",
            measured(p.a0_red, p.ar_red)
            and p.a0_red <= MAX_RED_A0 + EPS
            and p.ar_red >= MIN_RED_AR - EPS,
        ),
        Gate(
            "G-R2",
            values_text(teacher=p.teacher_plain),
            f"teacher ≥ {MIN_TEACHER_PLAIN:.2f}",
            measured(p.teacher_plain) and p.teacher_plain >= MIN_TEACHER_PLAIN - EPS,
        ),
        Gate(
            "G-R3",
            values_text(grounding=p.grounding),
            f"grounding ≥ {MIN_GROUNDING:.2f}",
            measured(p.grounding) and p.grounding >= MIN_GROUNDING - EPS,
        ),
        Gate(
            "G-R4",
            values_text(follows=p.follows_procedure, student=student, teacher=teacher),
            f"follows ≥ {MIN_FOLLOWS_PROCEDURE:.2f} and student ≤ teacher − "
            f"{MIN_TEACHER_MARGIN:.2f}",
            measured(p.follows_procedure, student, teacher)
            and p.follows_procedure >= MIN_FOLLOWS_PROCEDURE - EPS
            and student <= teacher - MIN_TEACHER_MARGIN + EPS,
        ),
    ]


def render_gates(gates: Sequence[Gate]) -> list[str]:
    """The premise table: what each gate measures, its value, its target, and the outcome."""
    rows = [
        [g.name, GATE_PREMISES.get(g.name, ""), g.value, g.target, "pass" if g.passed else "FAIL"]
        for g in gates
    ]
    return markdown_table(["gate", "premise", "value", "target", "outcome"], rows)
