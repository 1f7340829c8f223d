"""Trainer rollouts when an episode fails on the engine or sandbox, not the model (seen in
`beacon demo`: a sandbox session that failed to open left an episode with no tokens, and the
policy update crashed on it)."""

from __future__ import annotations

import pytest
from PIL import Image
from tests.agent.fakes import FakeSandbox, ScriptedEngine

from beacon.agent.config import AgentConfig
from beacon.agent.loop import AgentLoop
from beacon.benchmarks import get_benchmark
from beacon.images import load_image
from beacon.rollout import Rollouts
from beacon.types import Sample


def sample(sample_id: str) -> Sample:
    image = Image.new("RGB", (32, 24), "white")
    return Sample(id=sample_id, images=[image], question=f"{sample_id} which digit?", answer="3")


def rollouts(engine: ScriptedEngine) -> Rollouts:
    loop = AgentLoop(engine, FakeSandbox(), AgentConfig())
    return Rollouts(loop, get_benchmark("synth"), group_size=1, seed=0, concurrency=4)


def test_a_failed_episode_is_left_out_of_its_group() -> None:
    engine = ScriptedEngine({"ok": "<answer>3</answer>", "bad": "<answer>3</answer>"})
    engine.errors.add("bad")
    r = rollouts(engine)
    with r.loop:
        groups, stats = r.groups([sample("bad"), sample("ok")], step=1)
    assert [g.sample.id for g in groups] == ["ok"]
    assert groups[0].correct == [True] and not groups[0].trajectories[0].error
    assert groups[0].item == 1 and stats.failed == {"engine_error": 1}


def test_a_step_whose_every_episode_failed_stops_with_the_cause() -> None:
    engine = ScriptedEngine({"bad": "<answer>3</answer>"})
    engine.errors.add("bad")
    r = rollouts(engine)
    with (
        r.loop,
        pytest.raises(RuntimeError, match=r"every episode of step 4 failed.*engine_error.*500"),
    ):
        r.groups([sample("bad")], step=4)


def test_load_image_gives_each_episode_its_own_image() -> None:
    image = Image.new("RGB", (8, 8), "red")
    copy = load_image(image)
    assert copy is not image and copy.tobytes() == image.tobytes()
