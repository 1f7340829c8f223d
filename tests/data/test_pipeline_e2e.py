"""`difficulty -> expert -> hints` end to end on synth: the tiny model as base, the scripted
expert over real HTTP, code really executed in the sandbox, the SFT set read back."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from beacon.cli import app
from beacon.data.eval_stages import run_difficulty, run_expert
from beacon.data.hint_writing import run_hints
from beacon.images import ImageStore
from beacon.types import Trajectory

from .conftest import POOL, SHIPPED, data_config, overrides


def test_difficulty_expert_hints(tmp_path, scripted_server):
    server = scripted_server()
    cfg = data_config(tmp_path, server.base_url)

    difficulty = run_difficulty(cfg, progress=False)
    samples = (tmp_path / "difficulty" / "run" / "samples.jsonl").read_text().splitlines()
    assert len(samples) == POOL * 2  # K = 2 notool samples per item, one eval run
    assert difficulty.total == POOL
    assert difficulty.kept + sum(difficulty.dropped.values()) == POOL
    selected = (tmp_path / "difficulty" / "selected.jsonl").read_text().splitlines()
    assert len(selected) == difficulty.kept > 0  # random tiny weights solve almost nothing

    expert = run_expert(cfg, progress=False)
    assert expert.total == difficulty.kept
    assert expert.kept == expert.total, expert.dropped  # the scripted expert is always right
    rows = (tmp_path / "sft" / "trajectories.jsonl").read_text().splitlines()
    store = ImageStore(tmp_path / "sft" / "images")
    for line in rows:
        traj = Trajectory.from_dict(json.loads(line))
        assert traj.metadata["source"] in ("expert", "base_text")
        if traj.metadata["source"] != "expert":
            continue
        assert [s.role for s in traj.segments] == [
            "prompt",
            "generated",
            "generated",
            "observation",
            "generated",
        ]
        assert [s.kind for s in traj.segments][1:3] == ["text", "code"]
        call = traj.tool_calls[0]
        assert call.executed and call.ok and call.images  # the crop really ran
        assert traj.segments[3].images == call.images
        for key in [k for s in traj.segments for k in s.images]:
            assert store.path(key).exists()
        assert store.get(call.images[0]).width > 100  # an enlarged crop, not the original

    hints = run_hints(cfg, progress=False)
    assert hints.total == expert.kept
    assert hints.kept == hints.total, hints.dropped
    for line in (tmp_path / "hints" / "hints.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert record["accepted"] and record["hint"] and record["attempts"] == 1
    summary = json.loads((tmp_path / "hints" / "summary.json").read_text())
    assert summary["stage"] == "hints" and summary["kept"] == hints.kept

    # `beacon data all`, the stages through the one runner: a finished stage (its summary.json
    # there) is skipped, one without (killed before it finished) runs again, and only it
    (tmp_path / "hints" / "summary.json").unlink()
    sets = [a for o in overrides(tmp_path, server.base_url) for a in ("--set", o)]
    result = CliRunner().invoke(app, ["data", "all", "-c", str(SHIPPED), "--no-progress", *sets])
    assert result.exit_code == 0, result.output
    assert "[1/3] difficulty: already done" in result.output
    assert "[2/3] expert: already done" in result.output
    assert "[3/3] hints: done in " in result.output
    assert f"hints: kept {hints.kept} of {hints.total}" in result.output
    assert json.loads((tmp_path / "hints" / "summary.json").read_text()) == summary
