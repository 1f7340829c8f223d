"""summarize over a synthetic samples.jsonl-like record list."""

from __future__ import annotations

import json
import random

import pytest

from beacon.metrics import adaptivity, pair_modes, summarize


def _record(bench, sid, mode, k, correct, used, category, difficulty=None, tokens=100):
    return {
        "key": f"{bench}/{sid}/{mode}/{k}",
        "benchmark": bench,
        "sample_id": str(sid),
        "mode": mode,
        "k": k,
        "category": category,
        "difficulty": difficulty,
        "meta": {},
        "correct": correct,
        "score": float(correct),
        "parsed": True,
        "used_tool": used,
        "tool_calls": int(used),
        "attempted_tool_calls": int(used),
        "response_tokens": tokens,
        "code_tokens": 0,
        "finish_reason": "answer",
        "error": None,
    }


def synthetic_records(seed=0, k=2):
    """Two benchmarks (60 and 30 items), two categories, K samples per mode."""
    rng = random.Random(seed)
    records = []
    for bench, n_items in (("synth", 60), ("vstar", 30)):
        for i in range(n_items):
            hardness = rng.random()
            category = "small" if i % 2 else "large"
            difficulty = "hard" if hardness > 0.5 else "easy"
            for j in range(k):
                records.append(
                    _record(
                        bench, i, "notool", j, rng.random() > hardness, False, category, difficulty
                    )
                )
                used = rng.random() < hardness
                correct = rng.random() > hardness * (0.5 if used else 1.0)
                records.append(_record(bench, i, "tool", j, correct, used, category, difficulty))
    return records


@pytest.fixture(scope="module")
def records():
    return synthetic_records()


@pytest.fixture(scope="module")
def summary(records):
    return summarize(records, bootstrap=300, seed=0)


def test_sections_and_counts(summary):
    assert summary["overall"]["n_items"] == 90
    assert summary["overall"]["n_samples"] == 90 * 2 * 2
    assert list(summary["benchmarks"]) == ["synth", "vstar"]
    synth = summary["benchmarks"]["synth"]
    assert synth["n_items"] == 60
    assert set(synth["categories"]) == {"small", "large"}
    assert synth["categories"]["small"]["n_items"] == 30
    assert set(synth["difficulties"]) <= {"easy", "hard"}
    assert synth["n_easy"] + synth["n_hard"] == 60


def test_adaptivity_matches_the_public_function(records, summary):
    overall = adaptivity(pair_modes(records))
    vstar = adaptivity(pair_modes([r for r in records if r["benchmark"] == "vstar"]))
    for key, value in overall.items():
        if key.startswith("n_"):
            continue
        assert summary["overall"]["adaptivity"][key] == pytest.approx(value, abs=1e-12), key
        assert summary["benchmarks"]["vstar"]["adaptivity"][key] == pytest.approx(
            vstar[key], abs=1e-12
        )


def test_ci_contains_point_estimate(summary):
    for section in [summary["overall"], *summary["benchmarks"].values()]:
        for key, value in section["adaptivity"].items():
            low, high = section["ci"]["adaptivity"][key]
            if value is not None:
                assert low - 1e-12 <= value <= high + 1e-12, key
        for mode, stats in section["modes"].items():
            for key, value in stats.items():
                low, high = section["ci"]["modes"][mode][key]
                if value is not None:
                    assert low - 1e-12 <= value <= high + 1e-12, (mode, key)


def test_bootstrap_is_deterministic_under_seed(records, summary):
    assert summarize(records, bootstrap=300, seed=0) == summary
    other = summarize(records, bootstrap=300, seed=1)
    assert other["overall"]["ci"] != summary["overall"]["ci"]
    assert other["overall"]["adaptivity"] == summary["overall"]["adaptivity"]


def test_intervals_do_not_depend_on_the_order_episodes_finished(records, summary):
    shuffled = list(records)
    random.Random(3).shuffle(shuffled)  # records are written as episodes finish
    assert summarize(shuffled, bootstrap=300, seed=0) == summary


def test_result_is_strict_json(summary):
    json.dumps(summary, allow_nan=False)
    # notool episodes never use a tool: accuracy with a tool is undefined -> null
    assert summary["overall"]["modes"]["notool"]["acc_with_tool"] is None
    assert summary["overall"]["ci"]["modes"]["notool"]["acc_with_tool"] == [None, None]


def test_overall_pools_items_not_benchmarks():
    # bench a: 1 item solved; bench b: 3 items unsolved -> pooled 1/4, not mean(1, 0) = 1/2
    records = [_record("a", 0, "notool", 0, True, False, None)]
    records += [_record("b", i, "notool", 0, False, False, None) for i in range(3)]
    s = summarize(records, bootstrap=0)
    assert s["overall"]["modes"]["notool"]["accuracy"] == pytest.approx(0.25)
    assert "ci" not in s["overall"]
    # only one mode: adaptivity is undefined, every item unpaired
    assert s["overall"]["adaptivity"]["te"] is None
    assert s["overall"]["n_unpaired"] == 4


def test_aggregators_per_benchmark_and_mode(records):
    def answered(mode_records):
        return {
            "n": len(mode_records),
            "acc": sum(r["correct"] for r in mode_records) / len(mode_records),
        }

    s = summarize(records, bootstrap=0, aggregators={"vstar": answered})
    aggregates = s["benchmarks"]["vstar"]["aggregates"]
    assert set(aggregates) == {"notool", "tool"}
    assert aggregates["tool"]["n"] == 60  # 30 items × 2 samples
    assert aggregates["tool"]["acc"] == pytest.approx(
        s["benchmarks"]["vstar"]["modes"]["tool"]["accuracy"]
    )
    assert "aggregates" not in s["benchmarks"]["synth"]


def test_duplicates_are_dropped(records):
    s = summarize(records + records[:10], bootstrap=0)
    assert s["overall"]["n_samples"] == len(records)


def test_negative_bootstrap_rejected(records):
    with pytest.raises(ValueError, match="bootstrap=-1"):
        summarize(records, bootstrap=-1)


def test_empty_records_give_empty_sections():
    s = summarize([], bootstrap=100)
    assert s["overall"]["n_items"] == 0
    assert s["benchmarks"] == {}
    assert s["overall"]["adaptivity"]["mode_adaptiveness"] is None


def test_record_without_correct_names_the_field():
    with pytest.raises(ValueError, match="has no 'correct'"):
        summarize([{"benchmark": "b", "sample_id": "1", "mode": "tool", "k": 0}], bootstrap=0)
