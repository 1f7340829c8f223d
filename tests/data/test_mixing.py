"""Mixing: correct text-only base trajectories join the SFT set at `mix.text_share`."""

from __future__ import annotations

import json

from PIL import Image

from beacon.data.config import load_data_config
from beacon.data.eval_stages import RunTrajectory, build_sft_set, mix_text_only
from beacon.images import ImageStore
from beacon.jsonl import write_jsonl_atomic
from beacon.types import Segment, ToolCall, Trajectory


def fake_difficulty_run(root, n_items: int) -> None:
    """A difficulty run folder: per item one correct text-only sample, one wrong, one with a
    correct tool-using sample (only the first kind may be mixed in)."""
    run = root / "difficulty" / "run"
    key_image = ImageStore(run / "images").put(Image.new("RGB", (8, 8), (1, 2, 3)))
    samples, trajectories = [], []
    for i in range(n_items):
        for k, (correct, tool) in enumerate([(True, False), (False, False), (True, True)]):
            key = f"synth/{i}/notool/{k}"
            samples.append(
                {"key": key, "benchmark": "synth", "sample_id": str(i), "correct": correct}
            )
            traj = Trajectory(
                sample_id=str(i),
                mode="notool",
                format="thyme",
                segments=[Segment(role="prompt", text="q", images=[key_image])],
            )
            if tool:
                traj.tool_calls = [ToolCall(code="print(1)", executed=True)]
            trajectories.append(json.dumps({"key": key, "trajectory": json.loads(traj.to_json())}))
    write_jsonl_atomic(run / "samples.jsonl", samples)
    write_jsonl_atomic(run / "trajectories.jsonl", trajectories)


def test_share_of_text_only_rows(tmp_path):
    fake_difficulty_run(tmp_path, n_items=10)
    cfg = load_data_config(None, [f"out={tmp_path}", "mix.text_share=0.2"])
    mixed = mix_text_only(cfg, n_expert=12)
    assert len(mixed) == 3  # round(0.2 / 0.8 * 12)
    assert len({m.record["sample_id"] for m in mixed}) == 3  # one per item
    for m in mixed:
        assert m.record["correct"] and not m.trajectory.used_tool
        assert m.trajectory.metadata["source"] == "base_text"
    assert mix_text_only(cfg, n_expert=100) == mix_text_only(cfg, n_expert=100)[:10]
    assert len(mix_text_only(cfg, n_expert=100)) == 10  # capped by what the run has


def test_no_mixing_at_share_zero_and_images_are_copied(tmp_path):
    fake_difficulty_run(tmp_path, n_items=2)
    assert mix_text_only(load_data_config(None, [f"out={tmp_path}", "mix.text_share=0"]), 5) == []
    cfg = load_data_config(None, [f"out={tmp_path}", "mix.text_share=0.5"])
    mixed: list[RunTrajectory] = mix_text_only(cfg, n_expert=2)
    assert build_sft_set(cfg, [], mixed) == 2
    rows = (tmp_path / "sft" / "trajectories.jsonl").read_text().splitlines()
    key = json.loads(rows[0])["segments"][0]["images"][0]
    assert ImageStore(tmp_path / "sft" / "images").path(key).exists()
