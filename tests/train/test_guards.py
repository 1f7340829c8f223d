"""Guard rails on the tiny model: a rollout engine left with stale weights raises the log-prob
gap alarm, a synced one does not; a trajectory altered after sampling is not trained on; an
alarm can stop the run resumably; `beacon report` draws a GRPO and an OPD run."""

from __future__ import annotations

import contextlib
import copy
import logging
from pathlib import Path
from typing import Any

import pytest

from beacon.cli import app
from beacon.train.core.checkpoint import latest_checkpoint
from beacon.train.core.health import HealthAlarmError
from beacon.train.core.metrics import read_metrics
from beacon.train.grpo import run_grpo
from beacon.train.grpo.config import GRPOConfig

from .grpo_helpers import choice_processors, grpo_settings
from .opd_helpers import opd_settings

GAP = "health/sampler_logprob_gap"
ALARM = "health/alarm/sampler_logprob_gap"


def stale_pushes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Weight pushes into the rollout engine do nothing from now on (restored after the test):
    it keeps the initial weights the trainer started from."""
    from beacon.engines.hf import HFEngine

    monkeypatch.setattr(HFEngine, "load_weights", lambda self, state_dict: 0)


def grpo(out: Path, **settings: Any) -> GRPOConfig:
    cfg = grpo_settings(out, max_steps=2)
    for key, value in settings.items():
        section, name = key.split("__")
        cfg.setdefault(section, {})[name] = value
    return GRPOConfig.model_validate(cfg)


@pytest.mark.slow
def test_a_stale_rollout_engine_raises_the_gap_alarm_and_a_synced_one_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    run_grpo(grpo(tmp_path / "synced"), logits_processors=choice_processors)
    synced = read_metrics(tmp_path / "synced" / "metrics.jsonl")
    assert [m[ALARM] for m in synced] == [0, 0]
    assert max(m[GAP] for m in synced) < 1e-4  # float32 batch vs one forward: ~1e-6 measured
    stale_pushes(monkeypatch)
    with caplog.at_level(logging.WARNING):
        run_grpo(grpo(tmp_path / "stale"), logits_processors=choice_processors)
    stale = read_metrics(tmp_path / "stale" / "metrics.jsonl")
    assert stale[0][GAP] == synced[0][GAP]  # step 1 samples the weights both started with
    assert stale[1][ALARM] == 1 and stale[1][GAP] > 0.05  # step 2 samples the stale ones
    assert "health alarm sampler_logprob_gap at step 2" in caplog.text


@pytest.mark.slow
def test_stop_on_alarm_saves_the_step_and_the_run_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    stale_pushes(monkeypatch)
    stop = grpo(run, train__max_steps=3, train__save_every=5, health__stop_on_alarm=True)
    with pytest.raises(HealthAlarmError, match=r"sampler_logprob_gap at step 2.*--resume"):
        run_grpo(stop, logits_processors=choice_processors)
    assert latest_checkpoint(run).name == "checkpoint-2"
    go_on = grpo(run, train__max_steps=3, train__save_every=5, health__stop_on_alarm=False)
    state = run_grpo(go_on, resume=True, logits_processors=choice_processors)
    assert state.step == 3
    assert [m["step"] for m in read_metrics(run / "metrics.jsonl")] == [1, 2, 3]


@pytest.mark.slow
def test_a_trajectory_altered_after_sampling_is_dropped_with_its_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from beacon.train.core.setup import make_accelerator
    from beacon.train.grpo.recipe import build_parts, resolve_model

    cfg = resolve_model(grpo(tmp_path / "run"))
    with contextlib.ExitStack() as stack:
        accelerator = make_accelerator(cfg.model, cfg.train)
        parts = build_parts(cfg, accelerator, tmp_path / "run", stack, choice_processors)
        loop, run = parts.rollouts.loop, parts.rollouts.loop.run

        def altered(specs: list, max_active: int) -> list:
            out = copy.deepcopy(run(specs, max_active))
            out[0].segments[1].token_ids[0] += 1  # ids the engine never produced
            out[1].segments[0].images = []  # the prompt's image lost
            return out

        loop.run = altered
        with caplog.at_level(logging.WARNING):
            (group,), stats = parts.rollouts.groups([parts.samples[0]], step=0)
    assert len(group.trajectories) == cfg.rollout.group_size - 2
    assert stats.inconsistent == {"token_ids": 1, "image_count": 1}
    assert "dropped before training (token_ids)" in caplog.text


@pytest.mark.slow
def test_beacon_report_draws_a_grpo_and_an_opd_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_model_path: Path, teacher_path: Path
) -> None:
    from typer.testing import CliRunner

    from beacon.train.opd import run_opd
    from beacon.train.opd.config import OPDConfig

    run_opd(OPDConfig.model_validate(opd_settings(tiny_model_path, teacher_path, tmp_path / "opd")))
    opd_rows = read_metrics(tmp_path / "opd" / "metrics.jsonl")
    # the student samples freely here: student − teacher log-prob estimates KL(π ‖ q) > 0
    assert all(r["health/teacher_student_gap"] > 0 and r[GAP] < 1e-4 for r in opd_rows)
    stale_pushes(monkeypatch)
    run_grpo(grpo(tmp_path / "grpo"), logits_processors=choice_processors)
    runner = CliRunner()
    for run in ("grpo", "opd"):
        done = runner.invoke(app, ["report", str(tmp_path / run)])
        assert done.exit_code == 0, done.output
        plots = sorted(p.name for p in (tmp_path / run / "plots").iterdir())
        assert plots == ["train_health.png", "train_learning.png", "train_tool_use.png"]
    grpo_report = (tmp_path / "grpo" / "report.md").read_text()
    assert "| grpo | sampler_logprob_gap | 1 | 2 | 2 |" in grpo_report
    assert "No alarm fired." in (tmp_path / "opd" / "report.md").read_text()
    both = runner.invoke(app, ["report", str(tmp_path / "grpo"), str(tmp_path / "opd"),
                               "--out", str(tmp_path / "both")])  # fmt: skip
    assert both.exit_code == 0, both.output
    assert "| opd |" in (tmp_path / "both" / "report.md").read_text()
