"""benchmarks/demo_hint_crops.py counts, from an eval run's recorded crop boxes, which episodes
cropped the hinted ninth and which of them read the digit: the figure docs/demo.md gives for
the shipped cold start. Checked on a hand-made run folder, so the counting rule is pinned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from beacon.benchmarks.synth_demo import SynthDemoHinted
from beacon.config import to_yaml
from beacon.eval.config import EvalConfig
from beacon.types import ImageCrop, ToolCall, Trajectory

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _trajectory(sample_id: str, box: tuple[int, int, int, int] | None) -> Trajectory:
    """A tool-mode episode whose one call cropped `box` (None: no call)."""
    calls = (
        []
        if box is None
        else [ToolCall(code="crop", executed=True, image_crops=[ImageCrop(0, box)])]
    )
    return Trajectory(sample_id=sample_id, mode="tool", format="thyme", tool_calls=calls)


def test_hint_crops_counts_the_hinted_ninth_and_the_reads_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import demo_hint_crops

    items = list(SynthDemoHinted().load(limit=4, seed=0))
    cell = tuple(items[0].metadata["cell"])
    elsewhere = (0, 0, 10, 10)  # holds no box: every search box is wider than 10 pixels
    runs = [  # (item, crop box, answered right)
        (items[0], cell, True),
        (items[1], tuple(items[1].metadata["cell"]), False),
        (items[2], elsewhere, True),
        (items[3], None, False),
    ]
    config = EvalConfig(benchmarks=[SynthDemoHinted.name], limit=4, modes=["tool"])
    (tmp_path / "config.yaml").write_text(to_yaml(config))
    samples, trajectories = [], []
    for item, box, right in runs:
        key = f"{SynthDemoHinted.name}/{item.id}/tool/0"
        samples.append(
            {"key": key, "benchmark": SynthDemoHinted.name, "mode": "tool", "correct": right}
        )
        record = json.loads(_trajectory(item.id, box).to_json())
        trajectories.append(json.dumps({"key": key, "trajectory": record}))
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    (tmp_path / "trajectories.jsonl").write_text("\n".join(trajectories) + "\n")

    counts, right = demo_hint_crops.tally(tmp_path)

    assert counts == {"episodes": 4, "cropped": 3, "hinted ninth": 2, "box held": 2}
    assert right == {"episodes": 2, "cropped": 2, "hinted ninth": 1, "box held": 1}
