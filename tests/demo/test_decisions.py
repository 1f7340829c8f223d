"""Demo II's premise gates and pre-registered verdict rules (demo2_design §2.7, §4.2): every
gate at its bounds, every verdict reached from hand-built evidence, premise failure first, and
the exact permutation p on seed means counted by hand."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from beacon.demo.decisions import (
    Comparison,
    HgceEvidence,
    Outcome,
    RevueEvidence,
    Verdict,
    compare,
    hgce_verdict,
    permutation_p,
    render_rules,
    render_seed_table,
    render_verdict,
    revue_verdict,
)
from beacon.demo.gates import (
    HgcePremises,
    RevuePremises,
    hgce_gates,
    render_gates,
    revue_gates,
)
from beacon.demo.stats import Interval, paired_difference

NAN = float("nan")
HGCE_OK = HgcePremises(
    p_key_first=0.05,
    pass_at_8=0.3,
    hinted_success=0.6,
    unhinted_success=0.1,
    hinted_mixed=0.8,
    hinted_split=0.7,
)
REVUE_OK = RevuePremises(
    a0_red=0.2,
    ar_red=0.9,
    teacher_plain=0.9,
    grounding=0.95,
    follows_procedure=0.95,
    student_told=0.3,
    teacher_told=0.55,
)


def passed(gates: list) -> dict[str, bool]:
    return {g.name: g.passed for g in gates}


# -- gates -------------------------------------------------------------------------------------
def test_the_designs_pilot_values_pass_every_gate() -> None:
    assert passed(hgce_gates(HGCE_OK)) == {"G-H1": True, "G-H2": True, "G-H3": True, "G-H4": True}
    assert all(passed(revue_gates(REVUE_OK)).values())
    assert [g.name for g in revue_gates(REVUE_OK)] == ["G-R1", "G-R2", "G-R3", "G-R4"]


@pytest.mark.parametrize(
    ("changes", "gate", "ok"),
    [
        ({"p_key_first": 0.02}, "G-H1", True),  # the window is inclusive at both ends
        ({"p_key_first": 0.10}, "G-H1", True),
        ({"p_key_first": 0.019}, "G-H1", False),
        ({"p_key_first": 0.101}, "G-H1", False),
        ({"pass_at_8": 0.75}, "G-H2", True),
        ({"pass_at_8": 0.76}, "G-H2", False),
        ({"hinted_success": 0.5, "unhinted_success": 0.5 / 3}, "G-H3", True),  # both at bound
        ({"hinted_success": 0.49, "unhinted_success": 0.0}, "G-H3", False),  # luck-level
        ({"hinted_success": 0.6, "unhinted_success": 0.25}, "G-H3", False),  # only 2.4x
        ({"hinted_split": 0.5}, "G-H4", True),
        ({"hinted_split": 0.49}, "G-H4", False),  # most hinted groups cannot push the first crop
        ({"hinted_split": 0.1, "hinted_mixed": 0.9}, "G-H4", False),  # mixed on reading only
        ({"hinted_split": None}, "G-H4", False),  # not measured: fails
    ],
)
def test_hgce_gates_at_their_bounds(changes: dict, gate: str, ok: bool) -> None:
    gates = passed(hgce_gates(replace(HGCE_OK, **changes)))
    assert gates[gate] is ok
    assert all(v for name, v in gates.items() if name != gate)


@pytest.mark.parametrize(
    ("changes", "gate", "ok"),
    [
        ({"a0_red": 0.4}, "G-R1", True),
        ({"a0_red": 0.41}, "G-R1", False),  # the teacher does not err enough on red keys
        ({"ar_red": 0.85}, "G-R1", True),
        ({"ar_red": 0.84}, "G-R1", False),  # the reflection does not fix it
        ({"teacher_plain": 0.85}, "G-R2", True),
        ({"teacher_plain": 0.84}, "G-R2", False),  # the teacher errs on plain keys too
        ({"grounding": 0.9}, "G-R3", True),
        ({"grounding": 0.89}, "G-R3", False),
        ({"follows_procedure": 0.9}, "G-R4", True),
        ({"follows_procedure": 0.89}, "G-R4", False),
        ({"student_told": 0.4}, "G-R4", True),  # 0.55 − 0.15 = 0.4000000000000001 in floats
        ({"student_told": 0.41}, "G-R4", False),  # no room to distil
    ],
)
def test_revue_gates_at_their_bounds(changes: dict, gate: str, ok: bool) -> None:
    gates = passed(revue_gates(replace(REVUE_OK, **changes)))
    assert gates[gate] is ok
    assert all(v for name, v in gates.items() if name != gate)


@pytest.mark.parametrize("missing", [None, NAN])
def test_an_unmeasured_premise_fails_its_gate_and_says_so(missing: float | None) -> None:
    (h1, *_) = hgce_gates(replace(HGCE_OK, p_key_first=missing))
    assert not h1.passed and h1.value == "p0 = not measured"
    r4 = revue_gates(replace(REVUE_OK, teacher_told=missing))[3]
    assert not r4.passed and r4.value == "follows = 0.95, student = 0.30, teacher = not measured"


def test_gate_table_names_value_target_and_outcome() -> None:
    lines = render_gates(revue_gates(replace(REVUE_OK, a0_red=0.62)))
    assert lines[0] == "| gate | premise | value | target | outcome |"
    assert "| a0 = 0.62, aR = 0.90 | a0 ≤ 0.40 and aR ≥ 0.85 | FAIL |" in lines[2]
    assert lines[3].endswith("| pass |")


# -- verdicts: (a) ReVuE -----------------------------------------------------------------------
def cmp(point: float, low: float, high: float, a=(), b=(), labels=("A", "B")) -> Comparison:
    return Comparison(*labels, Interval(point, low, high), tuple(a), tuple(b))


REVUE = RevueEvidence(
    gates=revue_gates(REVUE_OK),
    primary=cmp(0.15, 0.07, 0.23, labels=("ReVuE", "vanilla")),
    content=cmp(0.20, 0.10, 0.30, labels=("ReVuE", "shuffled")),
    red=Interval(0.28, 0.12, 0.45),
    plain=Interval(0.02, -0.03, 0.07),
    control_shift=0.0,
)


def revue(**changes) -> Verdict:
    return revue_verdict(replace(REVUE, **changes))


def test_revue_reproduced_quotes_every_number_it_rests_on() -> None:
    verdict = revue()
    assert verdict.outcome is Outcome.REPRODUCED
    assert verdict.line == (
        "reproduced: ReVuE − vanilla +0.15 [+0.07, +0.23] > 0; ReVuE − shuffled +0.20 "
        "[+0.10, +0.30] > 0; red +0.28 [+0.12, +0.45] vs plain +0.02 [-0.03, +0.07]; the "
        "control stayed at the student"
    )


@pytest.mark.parametrize(
    "primary",
    [cmp(0.15, 0.07, 0.23), cmp(-0.2, -0.3, -0.1), cmp(0.0, -0.04, 0.04), cmp(0.05, -0.1, 0.2)],
)
def test_a_failed_premise_wins_over_every_result(primary: Comparison) -> None:
    gates = revue_gates(replace(REVUE_OK, a0_red=0.62))
    verdict = revue_verdict(replace(REVUE, gates=gates, primary=primary))
    assert verdict.line == "not tested: premise failed (G-R1 a0 = 0.62, aR = 0.90)"
    assert render_verdict(verdict) == f"**Verdict, ReVuE vs vanilla OPD**: {verdict.line}"


def test_every_failed_premise_is_named() -> None:
    gates = revue_gates(replace(REVUE_OK, grounding=0.5, follows_procedure=None))
    assert revue(gates=gates).reason == (
        "premise failed (G-R3 grounding = 0.50; "
        "G-R4 follows = not measured, student = 0.30, teacher = 0.55)"
    )
    assert revue(gates=[]).reason == "premise failed (no gate was measured)"


def test_no_interval_or_no_items_is_not_tested() -> None:
    assert revue(primary=cmp(0.1, NAN, NAN)).outcome is Outcome.NOT_TESTED
    assert revue(primary=cmp(NAN, NAN, NAN)).outcome is Outcome.NOT_TESTED


@pytest.mark.parametrize(
    ("interval", "outcome"),
    [
        ((-0.15, -0.25, -0.01), Outcome.OPPOSITE),
        ((-0.05, -0.10, 0.0), Outcome.NOT_REPRODUCED),  # touching 0 is not "below 0"
        ((0.01, -0.04, 0.049), Outcome.NOT_REPRODUCED),
        ((0.02, -0.04, 0.05), Outcome.INCONCLUSIVE),  # the bound itself is not ruled out
        ((0.10, 0.0, 0.20), Outcome.INCONCLUSIVE),  # low = 0: the interval reaches 0
        ((0.10, 0.001, 0.20), Outcome.REPRODUCED),
    ],
)
def test_revue_primary_boundaries(interval: tuple, outcome: Outcome) -> None:
    assert revue(primary=cmp(*interval)).outcome is outcome


def test_not_reproduced_says_a_small_gain_is_below_interest() -> None:
    verdict = revue(primary=cmp(0.02, 0.01, 0.04, labels=("ReVuE", "vanilla")))
    assert verdict.line == (
        "not reproduced: ReVuE − vanilla +0.02 [+0.01, +0.04]: upper bound below the smallest "
        "effect of interest (a gain, but below +0.05)"
    )


def test_inconclusive_names_the_effects_not_ruled_out_and_the_seed_p() -> None:
    # Seed sums: A 1.65 of 3.2 pooled; 8 of the 20 triples of the pooled six sum to ≥ 1.65
    # (abc, abf, acf, bce, bcf, bdf, bef, cef with a..f = 0.5, 0.6, 0.55, 0.45, 0.5, 0.6).
    primary = cmp(0.05, -0.03, 0.13, a=(0.5, 0.6, 0.55), b=(0.45, 0.5, 0.6))
    verdict = revue(primary=primary)
    assert verdict.line == (
        "inconclusive: no evidence either way: A − B +0.05 [-0.03, +0.13] (seed permutation p = "
        "0.400); the run could not rule out Δ ∈ [-0.03, +0.13]"
    )


@pytest.mark.parametrize(
    ("changes", "outcome", "says"),
    [
        ({"content": cmp(0.01, -0.05, 0.04)}, Outcome.OTHER_MECHANISM, "do as well"),
        ({"content": cmp(0.01, -0.05, 0.05)}, Outcome.INCONCLUSIVE, "reaches 0"),
        ({"content": cmp(0.08, -0.04, 0.20)}, Outcome.INCONCLUSIVE, "reaches 0"),
        ({"plain": Interval(0.15, 0.08, 0.22), "red": Interval(0.15, 0.0, 0.3)},
         Outcome.OTHER_MECHANISM, "not located on red keys"),
        ({"plain": Interval(0.03, -0.02, 0.08), "red": Interval(0.02, -0.1, 0.1)},
         Outcome.OTHER_MECHANISM, "not located"),  # red ≤ plain
        ({"plain": Interval(0.10, 0.03, 0.17)}, Outcome.REPRODUCED, ""),  # 0.10 < 0.28 / 2
        ({"plain": Interval(0.14, 0.03, 0.25)}, Outcome.OTHER_MECHANISM, "not located"),  # = ½
        ({"plain": Interval(0.14, -0.01, 0.29)}, Outcome.REPRODUCED, ""),  # plain CI holds 0
        ({"red": Interval(NAN, NAN, NAN)}, Outcome.INCONCLUSIVE, "stratum is undefined"),
        ({"control_shift": 0.02}, Outcome.INCONCLUSIVE, "moved off the student by +0.020"),
        ({"control_shift": None}, Outcome.INCONCLUSIVE, "control was not run"),
    ],
)  # fmt: skip
def test_revue_mechanism_checks(changes: dict, outcome: Outcome, says: str) -> None:
    verdict = revue(**changes)
    assert verdict.outcome is outcome
    assert says in verdict.reason


# -- verdicts: (b) HGCE ------------------------------------------------------------------------
HGCE = HgceEvidence(
    gates=hgce_gates(HGCE_OK),
    primary=cmp(0.20, 0.05, 0.35, (0.45, 0.5, 0.4), (0.25, 0.2, 0.3), ("HGCE", "accuracy-only")),
    content=cmp(0.18, 0.03, 0.33, labels=("HGCE", "uninformative")),
    hint_reliance=Interval(0.3, 0.1, 0.5),
    marked_drop=Interval(0.01, -0.03, 0.05),
    key_first_shift=Interval(0.3, 0.1, 0.5),
)


def hgce(**changes) -> Verdict:
    return hgce_verdict(replace(HGCE, **changes))


def test_hgce_reproduced_and_not_tested() -> None:
    assert hgce().line == (
        "reproduced: HGCE − accuracy-only +0.20 [+0.05, +0.35] > 0 (seed p = 0.050); "
        "HGCE − uninformative +0.18 [+0.03, +0.33] > 0; hint reliance +0.30; `marked` drop +0.01"
    )
    gates = hgce_gates(replace(HGCE_OK, p_key_first=0.01))
    assert hgce(gates=gates).line == "not tested: premise failed (G-H1 p0 = 0.01)"
    gates = hgce_gates(replace(HGCE_OK, hinted_success=0.11, unhinted_success=0.08))
    assert hgce(gates=gates, primary=cmp(-0.2, -0.3, -0.1)).outcome is Outcome.NOT_TESTED


@pytest.mark.parametrize(
    ("changes", "outcome", "says"),
    [
        ({"primary": cmp(-0.15, -0.25, -0.01)}, Outcome.OPPOSITE, "below 0"),
        ({"primary": cmp(0.0, -0.05, 0.04), "key_first_shift": Interval(0.0, -0.05, 0.05)},
         Outcome.NOT_REPRODUCED, "no P(key-first) shift +0.00 [-0.05, +0.05]"),
        ({"primary": cmp(0.0, -0.05, 0.04)}, Outcome.INCONCLUSIVE, "take-off may lie past"),
        ({"primary": cmp(0.0, -0.05, 0.04), "key_first_shift": Interval(0.0, NAN, NAN)},
         Outcome.INCONCLUSIVE, "shift was not measured"),
        ({"primary": cmp(0.1, -0.05, 0.25)}, Outcome.INCONCLUSIVE, "Δ ∈ [-0.05, +0.25]"),
        ({"content": cmp(0.0, -0.06, 0.04)}, Outcome.OTHER_MECHANISM, "uninformative hint"),
        ({"hint_reliance": Interval(0.0, -0.1, 0.1)}, Outcome.OTHER_MECHANISM, "no transfer"),
        ({"marked_drop": Interval(0.06, 0.0, 0.12)}, Outcome.OTHER_MECHANISM, "0.06 > 0.05"),
        ({"marked_drop": Interval(0.05, 0.0, 0.1)}, Outcome.REPRODUCED, ""),  # at the bound
        ({"hint_reliance": Interval(NAN, NAN, NAN)}, Outcome.INCONCLUSIVE, "not measured"),
        ({"content": cmp(0.12, -0.02, 0.26)}, Outcome.INCONCLUSIVE, "reaches 0"),
    ],
)  # fmt: skip
def test_hgce_rules(changes: dict, outcome: Outcome, says: str) -> None:
    verdict = hgce(**changes)
    assert verdict.outcome is outcome
    assert says in verdict.reason


@pytest.mark.parametrize(
    ("point", "seeds_a", "seeds_b", "outcome"),
    [
        (0.12, (0.5, 0.45, 0.4), (0.3, 0.35, 0.2), Outcome.REPRODUCED),  # separated, ≥ ½ Δ
        (0.10, (0.5, 0.45, 0.4), (0.3, 0.35, 0.2), Outcome.REPRODUCED),  # exactly ½ Δ
        (0.09, (0.5, 0.45, 0.4), (0.3, 0.35, 0.2), Outcome.INCONCLUSIVE),  # below ½ Δ
        (0.12, (0.5, 0.45, 0.3), (0.3, 0.35, 0.2), Outcome.INCONCLUSIVE),  # seeds overlap
        (0.12, (0.5,) * 5, (0.3,) * 5, Outcome.INCONCLUSIVE),  # 5 seeds: the CI must decide
    ],
)
def test_hgce_seed_table_stands_in_for_the_content_interval_at_three_seeds(
    point: float, seeds_a: tuple, seeds_b: tuple, outcome: Outcome
) -> None:
    content = cmp(point, -0.02, 0.26, seeds_a, seeds_b, ("HGCE", "uninformative"))
    verdict = hgce(content=content)
    assert verdict.outcome is outcome
    if outcome is Outcome.REPRODUCED:
        assert "every seed above (p = 0.050)" in verdict.reason


def test_every_verdict_is_reachable_for_both_claims() -> None:
    bad_revue = revue_gates(replace(REVUE_OK, grounding=0.1))
    revue_outcomes = {
        revue(gates=bad_revue).outcome,
        revue().outcome,
        revue(primary=cmp(0.0, -0.03, 0.03)).outcome,
        revue(primary=cmp(-0.1, -0.2, -0.05)).outcome,
        revue(content=cmp(0.0, -0.03, 0.03)).outcome,
        revue(primary=cmp(0.05, -0.05, 0.15)).outcome,
    }
    bad_hgce = hgce_gates(replace(HGCE_OK, pass_at_8=0.9))
    flat = {"primary": cmp(0.0, -0.03, 0.03), "key_first_shift": Interval(0.0, -0.1, 0.1)}
    hgce_outcomes = {
        hgce(gates=bad_hgce).outcome,
        hgce().outcome,
        hgce(**flat).outcome,
        hgce(primary=cmp(-0.1, -0.2, -0.05)).outcome,
        hgce(content=cmp(0.0, -0.03, 0.03)).outcome,
        hgce(primary=cmp(0.05, -0.05, 0.15)).outcome,
    }
    assert revue_outcomes == hgce_outcomes == set(Outcome)


# -- seeds: permutation p and tables -----------------------------------------------------------
def test_permutation_p_by_hand() -> None:
    # Pooled {0.6, 0.4, 0.5, 0.1}; the 6 splits give A sums 1.0 (observed), 1.1, 0.7, 0.9,
    # 0.5, 0.6: two are at least the observed one.
    assert permutation_p((0.6, 0.4), (0.5, 0.1)) == pytest.approx(2 / 6)
    assert permutation_p((3.0,), (1.0, 2.0)) == pytest.approx(1 / 3)  # unequal sizes
    assert permutation_p((0.5, 0.5), (0.5, 0.5)) == 1.0  # ties count
    assert math.isnan(permutation_p((), (0.5,)))


def test_separated_seeds_give_the_smallest_p() -> None:
    assert permutation_p((0.6, 0.7, 0.8), (0.1, 0.2, 0.3)) == pytest.approx(1 / 20)
    assert permutation_p((0.6, 0.7, 0.8, 0.9, 1.0), (0.1, 0.2, 0.3, 0.4, 0.5)) == pytest.approx(
        1 / 252
    )
    assert permutation_p((0.1, 0.2, 0.3), (0.6, 0.7, 0.8)) == 1.0  # one-sided


def test_seed_table_sits_beside_the_pooled_interval() -> None:
    lines = render_seed_table(HGCE.primary)
    assert lines[:3] == ["| seed | HGCE | accuracy-only |", "|---|---|---|", "| 0 | 0.45 | 0.25 |"]
    assert lines[-1] == (
        "Pooled HGCE − accuracy-only +0.20 [+0.05, +0.35]; exact one-sided permutation p on "
        "seed means 0.050 (smallest possible 0.050)."
    )
    uneven = render_seed_table(cmp(0.1, 0.0, 0.2, (0.5, 0.6), (0.4,)))
    assert uneven[3] == "| 1 | 0.60 | — |"


def test_rules_print_the_thresholds_the_code_uses() -> None:
    text = "\n".join(render_rules())
    for target in ("0.02 ≤ p0 ≤ 0.10", "pass@8 ≤ 0.75", "a0 ≤ 0.40 and aR ≥ 0.85",
                   "student ≤ teacher − 0.15", "upper bound < +0.05", "drop > 0.05"):  # fmt: skip
        assert target in text
    assert 'Never "not reproduced"' in text
    assert "+0.10" in "\n".join(render_rules(smallest_effect=0.10))


def seed_records(tool: list[bool]) -> list[dict]:
    """One seed's eval records: item i answered right in tool mode as tool[i]."""
    return [
        {"benchmark": "synth_keys", "sample_id": f"i{i}", "mode": mode, "k": 0,
         "key": f"synth_keys/i{i}/{mode}/0", "difficulty": "hard", "category": None,
         "correct": ok and mode == "tool", "score": float(ok and mode == "tool"),
         "used_tool": mode == "tool"}
        for i, ok in enumerate(tool)
        for mode in ("tool", "notool")
    ]  # fmt: skip


def test_compare_pools_the_paired_interval_and_keeps_each_seeds_point() -> None:
    runs_a = [seed_records([True, False]), seed_records([True, True])]
    runs_b = [seed_records([False, False])]
    comparison = compare("A", runs_a, "B", runs_b, n_resamples=200)
    assert comparison.seeds_a == (0.5, 1.0) and comparison.seeds_b == (0.0,)
    assert comparison.difference == paired_difference(runs_a, runs_b, "acc_tool", 200)
    assert comparison.difference.point == pytest.approx(0.75)
    assert comparison.p_value == pytest.approx(1 / 3)  # A sum 1.5 of {0.5, 1.0, 0.0}: 1 of 3
