"""OPD with its rollouts on two `beacon serve` processes (`rollout.servers`, the weight sync GRPO
uses): the same rollouts and losses as in-process rollouts at the same seed; a server that
restarts mid-run (back on its checkpoint's weights) raises the sampler log-prob gap alarm, and
the resumed run pushes the trained weights to it again."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch

from beacon.train.core import setup
from beacon.train.core.checkpoint import latest_checkpoint
from beacon.train.core.health import HealthAlarmError
from beacon.train.core.metrics import read_metrics
from beacon.train.opd import run_opd
from beacon.train.opd.config import OPDConfig

from .opd_helpers import opd_settings
from .servers import API_KEY, beacon_servers

GAP = "health/sampler_logprob_gap"
SAME = ("step", "retained", "loss_tokens", "tokens", "accuracy", "coverage_complete")


def _served(settings: dict[str, Any], urls: list[str]) -> dict[str, Any]:
    settings["rollout"].update(servers=urls, server_api_key_env="ROLLOUT_KEY")
    return settings


def _records(run: Path) -> list[tuple]:
    keys = ("step", "group", "slot", "correct", "positions", "tokens", "reflected")
    lines = (run / "revue.jsonl").read_text().splitlines()
    return [tuple(r[k] for k in keys) for r in map(json.loads, lines)]


@pytest.mark.slow
def test_opd_on_two_servers_repeats_in_process_rollouts_and_survives_a_restart(
    tiny_model_path: Path,
    teacher_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    local = tmp_path / "local"
    run_opd(OPDConfig.model_validate(opd_settings(tiny_model_path, teacher_path, local)))
    monkeypatch.setenv("ROLLOUT_KEY", API_KEY)
    with beacon_servers(tiny_model_path, 2) as servers:
        urls = [server.url for server in servers]
        served = tmp_path / "served"
        settings = _served(opd_settings(tiny_model_path, teacher_path, served), urls)
        run_opd(OPDConfig.model_validate(settings))
        assert _records(served) == _records(local) and len(_records(local)) == 16
        for a, b in zip(*(read_metrics(r / "metrics.jsonl") for r in (local, served)), strict=True):
            assert {k: a[k] for k in SAME} == {k: b[k] for k in SAME}
            # the servers batch other requests together than the in-process engine does
            assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
            assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
            assert b[GAP] < 1e-4

        # server 2 restarts right after the push that follows step 1: step 2 samples half its
        # episodes from the checkpoint's weights
        pushes = []
        sync = setup.WeightSync.__call__

        def push_then_restart(self: setup.WeightSync, *args: Any) -> None:
            sync(self, *args)
            pushes.append(1)
            if len(pushes) == 2:
                servers[1].restart()

        monkeypatch.setattr(setup.WeightSync, "__call__", push_then_restart)
        restarted = tmp_path / "restarted"
        settings = _served(opd_settings(tiny_model_path, teacher_path, restarted), urls)
        settings["train"]["max_steps"] = 3
        settings["health"] = {"stop_on_alarm": True, "logprob_gap_max": 1e-3}
        with caplog.at_level(logging.WARNING), pytest.raises(HealthAlarmError, match="step 2"):
            run_opd(OPDConfig.model_validate(settings))
        assert latest_checkpoint(restarted).name == "checkpoint-2"
        monkeypatch.setattr(setup.WeightSync, "__call__", sync)
        run_opd(OPDConfig.model_validate(settings), resume=True)  # pushes checkpoint-2 to both
    rows = read_metrics(restarted / "metrics.jsonl")
    assert [m["step"] for m in rows] == [1, 2, 3]
    assert rows[0][GAP] < 1e-4 and rows[1][GAP] > 1e-3 and rows[2][GAP] < 1e-4
    assert "health alarm sampler_logprob_gap at step 2" in caplog.text


class _Acc:
    """The accelerator calls `WeightSync` makes, recorded."""

    is_fsdp2 = False
    state = type("State", (), {"deepspeed_plugin": None})()

    def __init__(self, main: bool) -> None:
        self.is_main_process, self.calls = main, []

    def unwrap_model(self, model: Any) -> Any:
        return model

    def wait_for_everyone(self) -> None:
        self.calls.append("wait")


@pytest.mark.parametrize(
    ("shared", "main", "pushed", "calls"),
    [(True, True, 1, ["wait"]), (True, False, 0, ["wait"]), (False, False, 1, [])],
    ids=["servers-main", "servers-other", "in-process"],
)
def test_servers_get_one_push_per_step_in_process_engines_one_each(
    shared: bool, main: bool, pushed: int, calls: list[str]
) -> None:
    """Servers are shared by all processes: the main process pushes, the others wait until it
    is done; each process pushes into its own in-process engine."""
    received: list[dict] = []
    sync = setup.WeightSync(engine=None, push=received.append, shared=shared)
    acc = _Acc(main)
    sync(acc, torch.nn.Linear(2, 2))
    assert len(received) == pushed and acc.calls == calls
    assert all(set(r) == {"weight", "bias"} for r in received)
