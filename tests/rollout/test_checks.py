"""`check_trajectory`: a trajectory is trained on only if it is what the engine sampled, image
for image and id for id; `Rollouts` leaves a failing one out of its group, counted by reason."""

from __future__ import annotations

import copy
import logging

import pytest
from tests.agent.fakes import FakeSandbox, ScriptedEngine
from tests.rollout.test_groups import sample

from beacon.agent.config import AgentConfig
from beacon.agent.loop import AgentLoop
from beacon.benchmarks import get_benchmark
from beacon.rollout import Inconsistency, Rollouts, check_trajectory, image_runs
from beacon.types import EngineView, Segment, Trajectory

PAD = 9  # the image pad id of these hand-built trajectories


def consistent() -> Trajectory:
    """prompt (1 image of 2 tokens) -> call -> observation (1 image of 3 tokens) -> answer; the
    engine's view recorded at the end of each call, as the agent loop records it."""
    prompt = Segment("prompt", "p", [1, PAD, PAD, 2], images=["a"])
    first = Segment("generated", "c", [3, 4])
    first.engine = EngineView.of([1, PAD, PAD, 2, 3, 4], images=1)
    observation = Segment("observation", "o", [5, PAD, PAD, PAD, 6], images=["b"])
    answer = Segment("generated", "x", [7])
    answer.engine = EngineView.of([1, PAD, PAD, 2, 3, 4, 5, PAD, PAD, PAD, 6, 7], images=2)
    return Trajectory("s", "tool", "thyme", segments=[prompt, first, observation, answer])


TOKENS = {"a": 2, "b": 3}


def test_a_trajectory_as_the_engine_saw_it_passes() -> None:
    assert image_runs(consistent().token_ids, PAD) == [2, 3]
    assert check_trajectory(consistent(), PAD, TOKENS.__getitem__) is None


def test_altered_ids_are_token_id_drift() -> None:
    traj = consistent()
    traj.segments[1].token_ids[0] = 30  # e.g. a server that re-tokenised the text
    found = check_trajectory(traj, PAD)
    assert found is not None and found.reason == "token_ids"


def test_a_lost_or_extra_image_is_an_image_count_mismatch() -> None:
    lost = consistent()
    lost.segments[2].images = []
    found = check_trajectory(lost, PAD)
    assert found is not None and found.reason == "image_count" and "engine had 2" in found.detail
    extra = consistent()
    extra.segments[3].engine = None  # without the engine's view, the ids still tell
    extra.segments[2].images.append("c")
    assert check_trajectory(extra, PAD).reason == "image_count"


def test_an_image_the_trainer_processes_to_another_size_or_cannot_load() -> None:
    found = check_trajectory(consistent(), PAD, {"a": 2, "b": 4}.__getitem__)
    assert found is not None and found.reason == "image_tokens" and "image 1" in found.detail
    missing = check_trajectory(consistent(), PAD, {"a": 2}.__getitem__)
    assert missing is not None and missing.reason == "image_missing"


def test_rollouts_leave_a_failing_trajectory_out_and_count_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def check(traj: Trajectory) -> Inconsistency | None:
        return Inconsistency("image_count", "one lost") if traj.sample_id == "bad" else None

    engine = ScriptedEngine({"ok": "<answer>3</answer>", "bad": "<answer>3</answer>"})
    loop = AgentLoop(engine, FakeSandbox(), AgentConfig())
    rollouts = Rollouts(loop, get_benchmark("synth"), 1, seed=0, concurrency=4, check=check)
    with loop, caplog.at_level(logging.WARNING):
        groups, stats = rollouts.groups([sample("bad"), sample("ok")], step=1)
    assert [g.sample.id for g in groups] == ["ok"]
    assert stats.inconsistent == {"image_count": 1} and stats.episodes == 2
    assert "episode of bad dropped before training (image_count): one lost" in caplog.text


def test_text_only_trajectories_are_not_checked() -> None:
    traj = copy.deepcopy(consistent())
    for segment in traj.segments:
        segment.token_ids = []
    assert check_trajectory(traj, PAD) is None
