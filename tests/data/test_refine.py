"""Refinement: reasoning rewritten, code and real outputs verbatim, answer still verified."""

from __future__ import annotations

import json

from beacon.benchmarks.synth import generate
from beacon.data.eval_stages import run_expert
from beacon.data.refine import apply_steps, check_rewrite
from beacon.types import Segment, Trajectory

from .conftest import POOL, data_config, select_all


def read(path) -> list[Trajectory]:
    return [Trajectory.from_dict(json.loads(line)) for line in path.read_text().splitlines()]


def test_refined_trajectories_keep_code_and_outputs(tmp_path, scripted_server):
    url = scripted_server().base_url
    plain_cfg = data_config(tmp_path / "plain", url)
    select_all(plain_cfg)
    run_expert(plain_cfg, progress=False)
    cfg = data_config(tmp_path / "refined", url, "expert.refine=true")
    select_all(cfg)
    summary = run_expert(cfg, progress=False)
    assert summary.kept == POOL and summary.extra["refined"] == POOL
    assert summary.extra["refine_rejected"] == {}
    # episodes finish in any order: pair them by item
    plain = sorted(read(tmp_path / "plain" / "expert" / "verified.jsonl"), key=_item)
    refined = sorted(read(tmp_path / "refined" / "expert" / "verified.jsonl"), key=_item)
    for before, after in zip(plain, refined, strict=True):
        assert after.metadata["refined"]
        assert [(s.role, s.kind) for s in after.segments] == [
            (s.role, s.kind) for s in before.segments
        ]
        for old, new in zip(before.segments, after.segments, strict=True):
            if old.role != "generated" or old.kind == "code":
                assert new.text == old.text and new.images == old.images  # verbatim
        assert after.segments[1].text.startswith("First I locate the evidence.")
        assert after.segments[1].text.endswith("<code>")
        assert after.final_answer == before.final_answer
    assert len((tmp_path / "refined" / "expert" / "refined.jsonl").read_text().splitlines()) == POOL


def trajectory(sample_id: str = "0") -> Trajectory:
    return Trajectory(
        sample_id=sample_id,
        mode="tool",
        format="thyme",
        segments=[
            Segment(role="prompt", text="user: <image>q"),
            Segment(role="generated", text="Zoom in.\n<code>"),
            Segment(role="generated", text="print(1)\n</code>", kind="code"),
            Segment(role="observation", text="<sandbox_output>1</sandbox_output>"),
            Segment(role="generated", text="So <answer>x</answer>"),
        ],
        metadata={"benchmark": "synth", "eval_key": "synth/0/tool/0"},
    )


def test_rewrites_that_break_the_rules_are_refused():
    sample = generate(0, 0)
    traj = trajectory()
    good = f"<step>Crop.</step><step>It reads <answer>{sample.answer}</answer></step>"
    assert check_rewrite(traj, good, sample).steps is not None
    assert check_rewrite(traj, "<step>only one</step>", sample).reason == "step_count"
    smuggled = f"<step><code>x</code></step><step><answer>{sample.answer}</answer></step>"
    assert check_rewrite(traj, smuggled, sample).reason == "code_in_step"
    assert check_rewrite(traj, "<step>a</step><step>b</step>", sample).reason == "no_answer"
    wrong = "<step>a</step><step><answer>ZZZ</answer></step>"
    assert check_rewrite(traj, wrong, sample).reason == "answer_changed"
    new = apply_steps(traj, ["Crop.", "<answer>x</answer>"])
    assert new.segments[1].text == "Crop.\n<code>" and new.segments[2] == traj.segments[2]


def _item(trajectory):
    return trajectory.sample_id
