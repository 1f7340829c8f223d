"""beacon.md §1 metrics on hand-built item sets; expected values derived by hand in comments."""

from __future__ import annotations

import itertools
import math

import pytest

from beacon.metrics import adaptivity, pair_modes

TOL = 1e-12  # every expected value is a small rational computed in float64


def _item(n, t, u):
    return {"correct_notool": n, "correct_tool": t, "used_tool": u}


# K = 1. Columns: notool correct, tool correct, tool used.
#   1: 1 1 0   easy, no tool
#   2: 1 0 1   easy, tool used, harmed
#   3: 1 1 1   easy, tool used
#   4: 0 1 1   hard, tool used, gained
#   5: 0 0 1   hard, tool used, still wrong
#   6: 0 1 0   hard, solved in tool mode without a call
BOOLEAN_ITEMS = [
    _item(True, True, False),
    _item(True, False, True),
    _item(True, True, True),
    _item(False, True, True),
    _item(False, False, True),
    _item(False, True, False),
]


def test_boolean_items_by_hand():
    m = adaptivity(BOOLEAN_ITEMS)
    assert (m["n_items"], m["n_easy"], m["n_hard"]) == (6, 3, 3)
    assert m["acc_notool"] == pytest.approx(3 / 6, abs=TOL)  # items 1-3
    assert m["acc_tool"] == pytest.approx(4 / 6, abs=TOL)  # items 1, 3, 4, 6
    assert m["te"] == pytest.approx(1 / 6, abs=TOL)  # 4/6 - 3/6
    assert m["te_easy"] == pytest.approx(-1 / 3, abs=TOL)  # (0 - 1 + 0) / 3
    assert m["te_hard"] == pytest.approx(2 / 3, abs=TOL)  # (1 + 0 + 1) / 3
    assert m["p_notool_given_easy"] == pytest.approx(1 / 3, abs=TOL)  # item 1 of 1-3
    assert m["p_tool_given_hard"] == pytest.approx(2 / 3, abs=TOL)  # items 4, 5 of 4-6
    assert m["mode_adaptiveness"] == pytest.approx(0.5, abs=TOL)  # (1/3 + 2/3) / 2
    assert m["gain_share"] == pytest.approx(2 / 6, abs=TOL)  # items 4, 6
    assert m["harm_share"] == pytest.approx(1 / 6, abs=TOL)  # item 2
    assert m["gain_share"] - m["harm_share"] == pytest.approx(m["te"], abs=TOL)  # always TE
    assert m["text_retain"] == pytest.approx(2 / 3, abs=TOL)  # items 1, 3 of the 3 solved
    assert m["gain"] == pytest.approx(2 / 3, abs=TOL)  # 2 of the 3 unsolved items
    assert m["harm"] == pytest.approx(1 / 3, abs=TOL)  # 1 of the 3 solved items
    assert m["delta_te"] == pytest.approx(1 / 3, abs=TOL)  # differs from TE = 1/6
    assert m["tool_rate"] == pytest.approx(4 / 6, abs=TOL)  # items 2-5


def _samples(sample_id, notool, tool, used):
    """Sample records of one item: notool / tool correctness lists and tool-mode used_tool."""
    out = [
        {"benchmark": "b", "sample_id": sample_id, "mode": "notool", "k": k, "correct": c}
        for k, c in enumerate(notool)
    ]
    out += [
        {
            "benchmark": "b",
            "sample_id": sample_id,
            "mode": "tool",
            "k": k,
            "correct": c,
            "used_tool": u,
        }
        for k, (c, u) in enumerate(zip(tool, used, strict=True))
    ]
    return out


# K_notool = 2, K_tool = 4. Per-item means:
#   a: p_n = 1.0, p_t = 0.75, u = 0.25
#   b: p_n = 0.5, p_t = 1.0,  u = 0.75
#   c: p_n = 0.0, p_t = 0.25, u = 1.0
K_SAMPLE_RECORDS = (
    _samples("a", [1, 1], [1, 1, 0, 1], [1, 0, 0, 0])
    + _samples("b", [1, 0], [1, 1, 1, 1], [1, 1, 1, 0])
    + _samples("c", [0, 0], [0, 1, 0, 0], [1, 1, 1, 1])
)


def test_pair_modes_takes_per_item_means():
    items = {item["sample_id"]: item for item in pair_modes(K_SAMPLE_RECORDS)}
    assert items["a"]["correct_notool"] == 1.0
    assert items["b"]["correct_notool"] == 0.5
    assert items["a"]["correct_tool"] == 0.75
    assert items["c"]["correct_tool"] == 0.25
    assert items["b"]["used_tool"] == 0.75
    assert (items["a"]["k_notool"], items["a"]["k_tool"]) == (2, 4)


def test_k_samples_by_hand_default_threshold():
    m = adaptivity(pair_modes(K_SAMPLE_RECORDS))
    # easy iff p_n >= 0.5: a, b easy; c hard
    assert (m["n_easy"], m["n_hard"]) == (2, 1)
    assert m["acc_notool"] == pytest.approx(0.5, abs=TOL)  # (1 + .5 + 0) / 3
    assert m["acc_tool"] == pytest.approx(2 / 3, abs=TOL)  # (.75 + 1 + .25) / 3
    assert m["te"] == pytest.approx(1 / 6, abs=TOL)
    assert m["te_easy"] == pytest.approx(0.125, abs=TOL)  # ((.75 - 1) + (1 - .5)) / 2
    assert m["te_hard"] == pytest.approx(0.25, abs=TOL)  # .25 - 0
    assert m["p_notool_given_easy"] == pytest.approx(0.5, abs=TOL)  # ((1 - .25) + (1 - .75)) / 2
    assert m["p_tool_given_hard"] == pytest.approx(1.0, abs=TOL)
    assert m["mode_adaptiveness"] == pytest.approx(0.75, abs=TOL)
    assert m["gain_share"] == pytest.approx(0.25, abs=TOL)  # (.75·0 + 1·.5 + .25·1) / 3
    assert m["harm_share"] == pytest.approx(1 / 12, abs=TOL)  # (1·.25 + .5·0 + 0·.75) / 3
    assert m["text_retain"] == pytest.approx(5 / 6, abs=TOL)  # (1·.75 + .5·1 + 0) / (1 + .5 + 0)
    assert m["gain"] == pytest.approx(0.5, abs=TOL)  # .75 / (0 + .5 + 1)
    assert m["harm"] == pytest.approx(1 / 6, abs=TOL)  # 1 - text_retain
    assert m["delta_te"] == pytest.approx(1 / 3, abs=TOL)  # 1/2 - 1/6
    assert m["tool_rate"] == pytest.approx(2 / 3, abs=TOL)  # (.25 + .75 + 1) / 3


def test_k_samples_threshold_one_means_solved_every_time():
    m = adaptivity(pair_modes(K_SAMPLE_RECORDS), easy_threshold=1.0)
    # easy = {a}; hard = {b, c}
    assert (m["n_easy"], m["n_hard"]) == (1, 2)
    assert m["p_notool_given_easy"] == pytest.approx(0.75, abs=TOL)  # 1 - .25
    assert m["p_tool_given_hard"] == pytest.approx(0.875, abs=TOL)  # (.75 + 1) / 2
    assert m["mode_adaptiveness"] == pytest.approx(0.8125, abs=TOL)
    assert m["te_easy"] == pytest.approx(-0.25, abs=TOL)
    assert m["te_hard"] == pytest.approx(0.375, abs=TOL)  # ((1 - .5) + (.25 - 0)) / 2
    assert m["gain"] == pytest.approx(0.5, abs=TOL)  # gain and harm ignore the split


def test_joint_metrics_equal_the_mean_over_all_sample_pairings():
    """gain, harm, TE, Text-Retain with K samples = the K = 1 metrics over every (notool sample,
    tool sample) pairing of an item (same K for every item, so each pairing weighs the same)."""
    pairings = []
    per_item: dict[str, dict[str, list]] = {}
    for r in K_SAMPLE_RECORDS:
        per_item.setdefault(r["sample_id"], {}).setdefault(r["mode"], []).append(r)
    for modes in per_item.values():
        for n, t in itertools.product(modes["notool"], modes["tool"]):
            pairings.append(_item(bool(n["correct"]), bool(t["correct"]), bool(t["used_tool"])))
    paired = adaptivity(pairings)
    aggregated = adaptivity(pair_modes(K_SAMPLE_RECORDS))
    for key in (
        "gain",
        "harm",
        "delta_te",
        "te",
        "text_retain",
        "gain_share",
        "harm_share",
        "tool_rate",
    ):
        assert aggregated[key] == pytest.approx(paired[key], abs=TOL), key


def test_joint_shares_differ_by_te_and_harm_is_one_minus_text_retain():
    """beacon.md §1: the joint shares' difference is TE item by item, so Δ_TE is conditional."""
    items = [_item(0.3, 0.9, 0.5), _item(1.0, 0.0, 1.0), _item(0.6, 0.6, 0.2)]
    m = adaptivity(items)
    assert m["gain_share"] - m["harm_share"] == pytest.approx(m["te"], abs=TOL)
    assert m["harm"] == pytest.approx(1 - m["text_retain"], abs=TOL)
    # float64 by hand: gain = Σ p_t(1-p_n) / Σ (1-p_n), harm = Σ p_n(1-p_t) / Σ p_n
    gain = (0.9 * 0.7 + 0.0 * 0.0 + 0.6 * 0.4) / (0.7 + 0.0 + 0.4)
    harm = (0.3 * 0.1 + 1.0 * 1.0 + 0.6 * 0.4) / (0.3 + 1.0 + 0.6)
    assert m["delta_te"] == pytest.approx(gain - harm, abs=TOL)


def test_no_easy_items_gives_nan_not_an_error():
    m = adaptivity([_item(False, True, True), _item(False, False, False)])
    assert (m["n_easy"], m["n_hard"]) == (0, 2)
    for key in ("mode_adaptiveness", "p_notool_given_easy", "te_easy", "text_retain", "harm"):
        assert math.isnan(m[key]), key
    assert m["p_tool_given_hard"] == pytest.approx(0.5, abs=TOL)
    assert m["te_hard"] == pytest.approx(0.5, abs=TOL)
    assert m["harm_share"] == 0.0


def test_no_hard_items_gives_nan_for_hard_side():
    m = adaptivity([_item(True, True, False)])
    assert math.isnan(m["mode_adaptiveness"])
    assert math.isnan(m["te_hard"])
    assert math.isnan(m["gain"]) and math.isnan(m["delta_te"])
    assert m["p_notool_given_easy"] == 1.0
    assert m["text_retain"] == 1.0


def test_empty_input_is_all_nan():
    m = adaptivity([])
    assert (m["n_items"], m["n_easy"], m["n_hard"]) == (0, 0, 0)
    assert math.isnan(m["acc_tool"])
    assert math.isnan(m["te"])


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"correct_notool": True, "correct_tool": 1.5, "used_tool": True}, "correct_tool=1.5"),
        ({"correct_notool": True, "correct_tool": None, "used_tool": True}, "correct_tool=None"),
        ({"correct_notool": True, "used_tool": True}, "missing 'correct_tool'"),
    ],
)
def test_bad_records_are_rejected_with_the_key(record, message):
    with pytest.raises(ValueError, match=message):
        adaptivity([record])


def test_bad_threshold_is_rejected():
    with pytest.raises(ValueError, match="easy_threshold=0"):
        adaptivity(BOOLEAN_ITEMS, easy_threshold=0)


def test_pair_modes_leaves_out_and_counts_items_missing_a_mode(caplog):
    lonely = {"benchmark": "b", "sample_id": "lonely", "mode": "tool", "k": 0, "correct": True}
    records = [*_samples("a", [1], [1], [0]), lonely]
    with caplog.at_level("WARNING"):
        items = pair_modes(records)
    assert [i["sample_id"] for i in items] == ["a"]
    assert "1 of 2 items lack" in caplog.text


def test_threshold_one_over_k_means_solved_at_least_once():
    # K = 3: one notool success gives p_n = 1/3, which must count as easy at threshold 1/3
    items = pair_modes(_samples("x", [1, 0, 0], [1], [0]) + _samples("y", [0, 0, 0], [1], [1]))
    m = adaptivity(items, easy_threshold=1 / 3)
    assert (m["n_easy"], m["n_hard"]) == (1, 1)
    assert adaptivity(items)["n_easy"] == 0  # default 0.5: 1/3 is not a majority
