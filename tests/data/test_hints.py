"""Hint leakage: leaking hints are rejected (and retried) through `beacon.train.grpo.hints`."""

from __future__ import annotations

import json

import pytest

from beacon.benchmarks.synth import generate
from beacon.data.eval_stages import run_expert
from beacon.data.hint_writing import judge_hint, run_hints
from beacon.data.scripted_expert import ScriptedSynthExpert

from .conftest import POOL, data_config, select_all


def test_leaking_hints_are_rejected_and_counted(tmp_path, scripted_server):
    cfg = data_config(tmp_path, scripted_server(leaky=True).base_url)
    select_all(cfg)
    assert run_expert(cfg, progress=False).kept == POOL
    summary = run_hints(cfg, progress=False)
    assert summary.kept == 0
    assert summary.dropped == {"leaks_answer": POOL}
    assert summary.extra["rejected_attempts"] == POOL * cfg.hints.max_attempts
    for line in (tmp_path / "hints" / "hints.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert record["hint"] is None and not record["accepted"]
        assert all(r["reasons"] for r in record["rejected"])


@pytest.mark.parametrize("index", range(50))
def test_scripted_hints_pass_the_leak_check(index):
    """Region in words, no coordinates: the honest scripted hint never trips the check."""
    sample = generate(0, index)
    hint = ScriptedSynthExpert(seed=0, count=1).hint(sample)
    assert judge_hint(hint, sample) == [], hint


@pytest.mark.parametrize(
    "hint",
    [
        "The answer is {answer}.",
        "Crop the top left; you should read {answer} there.",
        "",
    ],
)
def test_adversarial_hints_are_rejected(hint):
    sample = generate(0, 0)  # small_text: a 3-character code
    assert judge_hint(hint.format(answer=sample.answer.lower()), sample)


def test_option_letter_and_text_are_rejected():
    sample = generate(0, 4)  # relative_position: a choice item
    letter = sample.answer
    assert judge_hint(f"Pick option {letter} after zooming.", sample)
    assert judge_hint(f"It is {sample.options[letter]}.", sample)
