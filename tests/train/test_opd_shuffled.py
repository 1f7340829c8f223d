"""`revue.reflection_source: shuffled` end to end on CPU (tiny student and teacher, synth, the
scripted critic): the student's rollouts are those of the ReVuE run at the same seed (design
G3), only the teacher's targets change; a lone group per step draws from the previous step's
kept reflections, and a resumed run draws the same."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from beacon.train.core.metrics import read_metrics
from beacon.train.opd import run_opd
from beacon.train.opd import step as opd_step
from beacon.train.opd.config import OPDConfig
from beacon.train.opd.shuffled import POOL_FILE

from .opd_helpers import opd_settings as settings

COLLECT = opd_step.collect


def run(cfg: dict[str, Any], monkeypatch: pytest.MonkeyPatch, resume: bool = False) -> list:
    """Run OPD; the student's encoded sequences of every step, as the step collected them."""
    seen: list[list[list[int]]] = []

    def recorded(*args: Any, **kwargs: Any) -> Any:
        distilled, stats = COLLECT(*args, **kwargs)
        seen.append([e.input_ids for d in distilled for e in d.encoded])
        return distilled, stats

    monkeypatch.setattr(opd_step, "collect", recorded)
    run_opd(OPDConfig.model_validate(cfg), resume=resume)
    return seen


def test_the_student_rolls_out_the_same_under_both_reflection_sources(
    tiny_model_path: Path, teacher_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own_cfg = settings(tiny_model_path, teacher_path, tmp_path / "own")
    shuffled_cfg = settings(
        tiny_model_path, teacher_path, tmp_path / "shuffled", revue__reflection_source="shuffled"
    )
    for cfg in (own_cfg, shuffled_cfg):
        cfg["train"]["max_steps"] = 1
    own = run(own_cfg, monkeypatch)
    shuffled = run(shuffled_cfg, monkeypatch)
    assert len(own) == len(shuffled) == 1 and len(own[0]) == 8
    assert own == shuffled  # G3: the control changes the teacher's context, never the student
    (a,) = read_metrics(tmp_path / "own" / "metrics.jsonl")
    (b,) = read_metrics(tmp_path / "shuffled" / "metrics.jsonl")
    assert a["revue/shuffled"] == 0 and b["revue/shuffled"] == 1
    assert "revue/shuffled_none" not in a
    assert b["target_reflected"] + b["revue/shuffled_none"] == a["target_reflected"]
    # a random student never answers: every reflection of both items reads "OTHER: no final
    # answer given", so the borrowed ones say the same, and the same machinery gives the same
    # targets (the borrowed content is tested in tests/train/opd/test_shuffled.py)
    pool = json.loads((tmp_path / "shuffled" / POOL_FILE).read_text())["1"]
    assert {d["item"] for d in pool} == {"0", "1"} and len({d["text"] for d in pool}) == 1
    assert b["target_reflected"] == 8 and b["loss"] == a["loss"]
    for m in (a, b):
        assert 0 < m["revue/high_share_uniform"] < 1


def test_a_lone_group_draws_from_the_previous_step_and_a_resume_draws_the_same(
    tiny_model_path: Path, teacher_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def lone(out: Path, steps: int) -> dict[str, Any]:
        cfg = settings(tiny_model_path, teacher_path, out, revue__reflection_source="shuffled")
        cfg["rollout"]["items_per_step"] = 1
        cfg["train"]["max_steps"] = steps
        return cfg

    run(lone(tmp_path / "reference", 2), monkeypatch)
    first, second = read_metrics(tmp_path / "reference" / "metrics.jsonl")
    reflected = first["coverage_complete"] + first["coverage_diagnosis_only"]
    assert first["revue/shuffled_none"] == reflected > 0  # no other item yet: none, counted
    assert "target_reflected" not in first and first["target_no_reflection"] == reflected
    assert second["revue/shuffled_previous"] > 0 and second["target_reflected"] > 0

    # killed after step 2 kept its donors, before checkpoint-2: step 2 is redone from
    # checkpoint-1 by a new process state and must still draw from step 1's pool
    resumed = tmp_path / "resumed"
    run(lone(resumed, 2), monkeypatch)
    assert set(json.loads((resumed / POOL_FILE).read_text())) == {"1", "2"}
    shutil.rmtree(resumed / "checkpoint-2")
    run(lone(resumed, 2), monkeypatch, resume=True)
    assert [m["step"] for m in read_metrics(resumed / "metrics.jsonl")] == [1, 2]
    _, again = read_metrics(resumed / "metrics.jsonl")
    for key in ("loss", "revue/shuffled_previous", "revue/shuffled_none", "target_reflected"):
        assert again[key] == second[key], key
