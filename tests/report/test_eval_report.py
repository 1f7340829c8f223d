"""`write_report` on two fake run folders written in the evaluation record schema."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from PIL import Image

from beacon.eval.records import read_samples
from beacon.report.eval_runs import format_metric, write_report
from beacon.report.figures import PLOTS


def _record(bench, sid, mode, correct, used, category, tokens):
    return {
        "key": f"{bench}/{sid}/{mode}/0",
        "benchmark": bench,
        "sample_id": str(sid),
        "mode": mode,
        "k": 0,
        "category": category,
        "difficulty": None,
        "meta": {},
        "correct": correct,
        "score": float(correct),
        "parsed": True,
        "prediction": "B",
        "answer": "B",
        "verdict_source": "rule",
        "used_tool": used,
        "tool_calls": 2 if used else 0,
        "attempted_tool_calls": 2 if used else 0,
        "response_tokens": tokens,
        "code_tokens": 0,
        "finish_reason": "answer",
        "error": None,
        "wall_time_s": 1.0,
        "trajectory": {"file": "trajectories.jsonl", "key": f"{bench}/{sid}/{mode}/0"},
    }


# Run A, benchmark synth, K = 1. Columns: notool correct, tool correct, tool used.
#   0: 1 1 0 (small)   1: 1 0 1 (small)   2: 0 1 1 (large)   3: 0 1 1 (large)
# acc_notool = 2/4 = 50.0, acc_tool = 3/4 = 75.0, TE = +25.0
# easy = {0, 1}: TE_easy = (0 - 1)/2 = -50.0; hard = {2, 3}: TE_hard = +100.0
# gain = P[✓tool | ✗notool] = 2/2 = 100.0, harm = P[✗tool | ✓notool] = 1/2 = 50.0, Δ_TE = +50.0
# gain share = 2/4 = 50.0 (items 2, 3), harm share = 1/4 = 25.0 (item 1)
# MA = ½(P[no tool | easy] + P[tool | hard]) = ½(1/2 + 2/2) = 75.0; Text-Retain = 1/2 = 50.0
RUN_A_SYNTH = [(1, 1, 0, "small"), (1, 0, 1, "small"), (0, 1, 1, "large"), (0, 1, 1, "large")]
EXPECTED_A_SYNTH_ROW = (
    "| run-a | 4 | 50.0 | 75.0 | +25.0 | -50.0 | +100.0 | 100.0 | 50.0 | +50.0 | 50.0 | 25.0 "
    "| 75.0 | 50.0 |"
)
# Run A tool mode on synth: tool-call rate 3/4 = 75.0, calls/episode 6/4 = 1.50, tokens (300·3 +
# 100)/4 = 250, acc with tool 2/3 = 66.7 (items 2, 3 of 1, 2, 3), acc without tool 1/1 = 100.0
EXPECTED_A_SYNTH_TOOL_ROW = "| run-a | tool | 75.0 | 75.0 | 1.50 | 250 | 66.7 | 100.0 | 0.0 | 0.0 |"


def _run_records(rows, bench):
    records = []
    for sid, (notool, tool, used, category) in enumerate(rows):
        records.append(_record(bench, sid, "notool", bool(notool), False, category, 100))
        records.append(
            _record(bench, sid, "tool", bool(tool), bool(used), category, 300 if used else 100)
        )
    return records


def _write_run(folder: Path, config: str, records, tail: str = "") -> Path:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(config)
    lines = "".join(json.dumps(r) + "\n" for r in records)
    (folder / "samples.jsonl").write_text(lines + tail)
    return folder


@pytest.fixture
def two_runs(tmp_path):
    vstar = [(1, 1, 0, None), (0, 0, 1, None), (1, 1, 1, None)]
    run_a = _write_run(
        tmp_path / "a",
        "label: run-a\nmodel: {name: org/model-a}\n",
        _run_records(RUN_A_SYNTH, "synth") + _run_records(vstar, "vstar"),
        tail='{"key": "synth/9/tool/0", "bench',  # torn by kill -9
    )
    run_b = _write_run(
        tmp_path / "b",
        "model: org/model-b\n",
        _run_records([(0, 1, 1, "small"), (1, 1, 0, "large")], "synth"),
    )
    stored = {"benchmarks": {"synth": {"aggregates": {"tool": {"strict_acc": 0.5}}}}}
    (run_b / "summary.json").write_text(json.dumps(stored))
    return run_a, run_b


def test_report_tables_by_hand(two_runs, tmp_path):
    report = write_report(two_runs, tmp_path / "out", bootstrap=0)
    text = report.read_text()
    assert "## Benchmark: synth" in text and "## Benchmark: vstar" in text
    assert EXPECTED_A_SYNTH_ROW in text
    assert EXPECTED_A_SYNTH_TOOL_ROW in text
    # run b's label comes from its model name; its stored benchmark aggregate is shown
    assert "| org/model-b | 2 |" in text
    assert "| org/model-b | tool | 0.5 |" in text
    # category split of run a on synth: small = items 0, 1 -> acc notool 100.0, acc tool 50.0
    assert "| run-a | small | 2 | 100.0 | 50.0 | -50.0 |" in text


def test_report_has_cis_and_valid_pngs(two_runs, tmp_path):
    out = tmp_path / "out"
    report = write_report(two_runs, out, bootstrap=200, seed=0)
    text = report.read_text()
    assert re.search(r"\| run-a \| 4 \| 50\.0 \[\d+\.\d, \d+\.\d\] \| 75\.0 \[", text)
    for name in PLOTS:
        assert f"](plots/{name}.png)" in text
        with Image.open(out / "plots" / f"{name}.png") as image:
            assert image.format == "PNG"
            image.verify()
    payload = json.loads((out / "report.json").read_text())
    assert set(payload) == {"run-a", "org/model-b"}
    assert payload["run-a"]["summary"]["overall"]["n_items"] == 7  # the torn line is skipped


def test_same_label_gets_folder_name(tmp_path):
    records = _run_records(RUN_A_SYNTH, "synth")
    runs = [_write_run(tmp_path / d, "model: m\n", records) for d in ("x", "y")]
    text = write_report(runs, tmp_path / "out", bootstrap=0).read_text()
    assert "| m (x) |" in text and "| m (y) |" in text


def test_corrupt_middle_line_is_an_error(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text('{"a": 1}\nnot json\n{"a": 2}\n')
    with pytest.raises(ValueError, match=r"samples.jsonl:2 is not valid JSON"):
        read_samples(path)


def test_missing_samples_is_an_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no samples\.jsonl"):
        write_report([tmp_path / "empty"], tmp_path / "out")


def test_format_metric():
    assert format_metric(0.612, 0.58, 0.641, "pct") == "61.2 [58.0, 64.1]"
    assert format_metric(0.0314, -0.01, 0.07, "diff") == "+3.1 [-1.0, +7.0]"
    assert format_metric(float("nan"), 0.1, 0.2, "pct") == "—"
    assert format_metric(311.4, float("nan"), float("nan"), "num0") == "311"
