"""`beacon eval` with modes tool, notool and gated on the tiny model and `synth`: every record
carries its wall time, gated records carry p_tool and the path, and the report sets gated
against tool and notool (accuracy, tool-call rate, wall time, threshold, items per path)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from beacon.agent.config import AgentConfig, GateConfig
from beacon.agent.gate import route
from beacon.cli import app
from beacon.config import describe
from beacon.engines.config import EngineConfig
from beacon.eval.config import EvalConfig
from beacon.eval.runner import run_eval
from beacon.report.eval_runs import report_eval_run

LIMIT = 3


def config(out: Path, modes: list[str], threshold: float, limit: int = LIMIT) -> EvalConfig:
    agent = AgentConfig(
        max_new_tokens_per_turn=12, max_total_new_tokens=24, gate=GateConfig(threshold=threshold)
    )
    return EvalConfig(
        agent=agent, modes=modes, limit=limit, out=str(out), bootstrap=50, concurrency=2
    )


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "samples.jsonl").open()]


@pytest.mark.slow
def test_gated_eval_reports_the_trade_off(tmp_path: Path, tiny_model_path: Path) -> None:
    out = tmp_path / "run"
    cfg = config(out, ["tool", "notool", "gated"], 0.7)
    summary = run_eval(cfg, progress=False)
    report_eval_run(cfg, summary)  # what `beacon eval` writes at the end
    rows = records(out)
    assert len(rows) == 3 * LIMIT
    assert all(r["wall_time_s"] > 0 for r in rows)
    by_mode = {mode: [r for r in rows if r["mode"] == mode] for mode in ("tool", "notool", "gated")}
    assert all(r["gate_p_tool"] is None and r["gate_path"] is None for r in by_mode["tool"])
    for record in by_mode["gated"]:
        assert 0.0 <= record["gate_p_tool"] <= 1.0
        assert record["gate_path"] == route(record["gate_p_tool"], 0.7)
    # the random tiny model almost never opens <code> first: every gated item goes text-only,
    # and greedy decoding then writes what the notool mode wrote
    assert {r["gate_path"] for r in by_mode["gated"]} == {"notool"}
    notool = {r["sample_id"]: r["prediction"] for r in by_mode["notool"]}
    assert all(r["prediction"] == notool[r["sample_id"]] for r in by_mode["gated"])
    assert not any(r["used_tool"] for r in by_mode["gated"])

    overall = summary["overall"]
    assert overall["gate_paths"] == {"tool": 0, "notool": LIMIT}
    gated = overall["modes"]["gated"]
    assert gated["gate_tool_path"] == 0.0 and gated["tool_rate"] == 0.0
    assert gated["gate_p_tool"] == pytest.approx(
        sum(r["gate_p_tool"] for r in by_mode["gated"]) / LIMIT
    )
    for mode in ("tool", "notool", "gated"):
        mean_wall = sum(r["wall_time_s"] for r in by_mode[mode]) / LIMIT
        assert overall["modes"][mode]["wall_time_s"] == pytest.approx(mean_wall)
        low, high = overall["ci"]["modes"][mode]["wall_time_s"]
        assert low <= overall["modes"][mode]["wall_time_s"] <= high
    assert overall["modes"]["tool"]["gate_p_tool"] is None  # gate stats exist for gated only
    assert overall["adaptivity"]["acc_tool"] is not None  # tool vs notool metrics untouched

    report = (out / "report.md").read_text()
    table = report[report.index("**Inference gate**") :].split("\n\n")[1].splitlines()
    assert "Threshold" in table[0] and "Wall s/episode" in table[0] and "→ notool" in table[0]
    cells = {row.split(" | ")[1]: row.split(" | ") for row in table[2:]}
    assert list(cells) == ["gated", "tool", "notool"]
    assert cells["gated"][2] == "0.7" and cells["gated"][-2:] == ["0", f"{LIMIT} |"]
    assert cells["tool"][2] == "—"


@pytest.mark.slow
def test_threshold_zero_sends_every_item_down_the_tool_path_with_a_gate_model(
    tmp_path: Path, tiny_model_path: Path
) -> None:
    """A separate gate model (`agent.gate.engine`; here the tiny model loaded a second time)
    scores p_tool; threshold 0 sends every item down the tool path."""
    out = tmp_path / "run"
    cfg = config(out, ["gated"], 0.0, limit=2)
    cfg.agent.gate.engine = EngineConfig(model="tiny", device="cpu")
    summary = run_eval(cfg, progress=False)
    rows = records(out)
    assert [r["gate_path"] for r in rows] == ["tool", "tool"]
    assert summary["overall"]["gate_paths"] == {"tool": 2, "notool": 0}
    trajectories = [json.loads(line)["trajectory"] for line in (out / "trajectories.jsonl").open()]
    assert all(t["mode"] == "tool" for t in trajectories)
    assert all(
        t["gate"]["threshold"] == 0.0 and t["gate"]["scorer"] == "tiny" for t in trajectories
    )


def test_help_and_show_config_describe_the_gate() -> None:
    settings = {s.name: s for s in describe(EvalConfig)}
    assert "gated" in settings["modes"].help
    assert "p_tool" in settings["agent.gate.threshold"].help
    assert settings["agent.gate.threshold"].default == "0.7"
    assert "separate" in settings["agent.gate.engine"].help
    shown = CliRunner().invoke(app, ["eval", "--show-config"]).output
    assert re.search(r"^agent\.gate\.threshold +float +0\.7 ", shown, re.M), shown
    assert "gated" in " ".join(CliRunner().invoke(app, ["eval", "--help"]).output.split())
