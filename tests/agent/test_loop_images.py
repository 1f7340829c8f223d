"""The loop stores an episode's images while its sandbox session opens."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PIL import Image

from beacon.agent.config import AgentConfig
from beacon.agent.episode import EpisodeSpec
from beacon.agent.loop import AgentLoop
from beacon.images import ImageStore, image_key
from beacon.types import Sample

from .fakes import FakeSandbox, FakeSession, ScriptedEngine


class RecordingSandbox(FakeSandbox):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[Image.Image] = []

    def session(self, images: Sequence[Image.Image], deferred: bool = False) -> FakeSession:
        self.images.extend(images)
        return super().session(images, deferred)


class RecordingStore(ImageStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.images: list[Image.Image] = []

    def _put(self, image: Image.Image) -> str:
        self.images.append(image)
        return super()._put(image)


def test_the_store_and_the_sandbox_share_the_loaded_image(tmp_path: Path) -> None:
    # A deferred session stores its inputs while the engine encodes the first request's: both
    # only read the image (the session never calls `save`, tests/sandbox/test_inputs.py), so
    # neither needs a copy of its own.
    image = Image.new("RGB", (32, 24), "navy")
    sample = Sample(id="s1", images=[image], question="s1 what is shown?", answer="B")
    engine = ScriptedEngine({"s1": "It is B. <answer>B</answer>"})
    sandbox, store = RecordingSandbox(), RecordingStore(tmp_path)
    with AgentLoop(engine, sandbox, AgentConfig(), store=store) as loop:
        (traj,) = loop.run([EpisodeSpec(sample, mode="tool")])
    assert traj.finish_reason == "answer"
    assert len(sandbox.images) == 1 and len(store.images) == 1
    assert sandbox.images[0] is store.images[0]
    assert traj.segments[0].images == [image_key(image)]  # the key the store computed ahead
    assert store.path(image_key(image)).exists() and sandbox.sessions[0].closed
    assert sandbox.sessions[0].opened  # stored its inputs while the model wrote its turn
