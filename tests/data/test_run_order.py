"""An eval run's episodes come back in item order, not in the order they finished."""

from __future__ import annotations

import json
import random
from pathlib import Path

from beacon.data.eval_stages import run_trajectories
from beacon.eval.records import SAMPLES_FILE, TRAJECTORIES_FILE
from beacon.types import Trajectory


def test_episodes_come_back_in_item_order_whatever_order_they_finished_in(
    tmp_path: Path,
) -> None:
    """The demo's SFT set was built in finishing order, which concurrency changes from run to
    run: the trainer's seeded shuffle then gave other batches, and another cold-start model,
    on every rerun. Two runs that finished in different orders must give the same sequence."""
    items = [
        ("synth_demo", sample_id, mode)
        for sample_id in ("10", "2", "1", "b", "a")
        for mode in ("tool", "notool")
    ]
    orders = []
    for seed in (0, 1):
        run = tmp_path / f"run{seed}"
        run.mkdir()
        finished = items[:]
        random.Random(seed).shuffle(finished)
        samples, trajectories = [], []
        for benchmark, sample_id, mode in finished:
            key = f"{benchmark}/{sample_id}/{mode}/0"
            samples.append(
                {
                    "key": key,
                    "benchmark": benchmark,
                    "sample_id": sample_id,
                    "mode": mode,
                    "k": 0,
                    "correct": True,
                }
            )
            traj = Trajectory(sample_id=sample_id, mode=mode, format="thyme")
            trajectories.append({"key": key, "trajectory": json.loads(traj.to_json())})
        for name, rows in ((SAMPLES_FILE, samples), (TRAJECTORIES_FILE, trajectories)):
            (run / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        orders.append([(d.record["sample_id"], d.trajectory.mode) for d in run_trajectories(run)])
    assert (
        orders[0]
        == orders[1]
        == [
            (sample_id, mode)
            for sample_id in ("1", "2", "10", "a", "b")
            for mode in ("notool", "tool")
        ]
    )
