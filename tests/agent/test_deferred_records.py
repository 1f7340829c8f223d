"""A remote engine's episodes record their prompt and observations (image keys and store files,
segments) while the server works on the next turn (`EpisodeState.defer_records`): the same
trajectories, in the same order, as recording each at once."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest
from PIL import Image

from beacon.agent.config import AgentConfig
from beacon.agent.episode import EpisodeSpec, EpisodeState
from beacon.agent.formats import get_format
from beacon.agent.loop import AgentLoop
from beacon.engines.base import GenerationResult
from beacon.images import ImageStore
from beacon.sandbox.config import ExecResult
from beacon.types import Sample, Trajectory

from .fakes import AsyncScriptedEngine, FakeSandbox, ScriptedEngine, sample_of


def thyme(code: str) -> str:
    return f"<code>\n```python\n{code}\n```\n</code>"


SCRIPTS = {
    "direct": "It is a square. <answer>B</answer>",
    "zoom": "Zoom. " + thyme("image.crop((0, 0, 8, 8)).show()") + "It is B. <answer>B</answer>",
    "twice": thyme("print(1)") + " more " + thyme("print(2)") + " <answer>A</answer>",
    "malformed": "</code> then <answer>C</answer>",
}


def sample(sample_id: str) -> Sample:
    image = Image.new("RGB", (32, 24), (10, len(sample_id), 200))
    return Sample(id=sample_id, images=[image], question=f"{sample_id} what is shown?", answer="B")


def crop_result() -> ExecResult:
    return ExecResult(ok=True, images=[Image.new("RGB", (8, 8), "red")])  # an image, no text


def episodes(engine: ScriptedEngine, store: Path, mode: str) -> list[Trajectory]:
    sandbox = FakeSandbox([crop_result(), ExecResult(ok=True)])
    specs = [EpisodeSpec(sample(i), mode=mode, hint="look closer") for i in SCRIPTS]
    with AgentLoop(engine, sandbox, AgentConfig(), store=ImageStore(store)) as loop:
        return loop.run(specs, max_active=3)


def by_sample(engine: ScriptedEngine) -> dict[str, list[str]]:
    sent: dict[str, list[str]] = {}
    for request in engine.requests:
        pixels = json.dumps(request.messages, default=lambda im: [im.size, im.tobytes().hex()])
        sent.setdefault(sample_of(request), []).append(pixels)
    return sent


def shape(traj: Trajectory) -> list[str]:
    return [s.role if s.role != "generated" else s.kind for s in traj.segments]


def record(traj: Trajectory) -> dict:
    data = json.loads(traj.to_json())
    data.pop("wall_time_s")
    return data


@pytest.mark.parametrize("mode", ["tool", "notool", "hinted"])
def test_deferred_records_make_the_same_trajectories(tmp_path: Path, mode: str) -> None:
    local, remote = ScriptedEngine(dict(SCRIPTS)), AsyncScriptedEngine(dict(SCRIPTS))
    at_once = episodes(local, tmp_path / "a", mode)
    deferred = episodes(remote, tmp_path / "b", mode)
    assert [record(t) for t in deferred] == [record(t) for t in at_once]
    assert by_sample(remote) == by_sample(local)  # what the model was sent, turn by turn
    if mode != "notool":
        zoom = deferred[list(SCRIPTS).index("zoom")]
        assert shape(zoom) == ["prompt", "text", "code", "observation", "text"]
        assert zoom.tool_calls[0].images and zoom.segments[3].images == zoom.tool_calls[0].images
        assert sorted(p.stem for p in (tmp_path / "b").rglob("*.png")) == sorted(
            {*zoom.segments[0].images, *zoom.tool_calls[0].images}
            | {k for t in deferred for k in t.segments[0].images}
        )
        assert zoom.evidence[0].images_available == 2
        assert "(no output)" not in zoom.segments[3].text  # an image is output
        twice = deferred[list(SCRIPTS).index("twice")]
        assert "(no output)" in twice.segments[6].text  # the second call returned nothing


def test_the_prompt_is_recorded_while_the_request_is_out(tmp_path: Path) -> None:
    """The store's `put` of the prompt image waits until the server has the first request: an
    agent loop that stored before requesting would never get there."""
    asked = threading.Event()

    class WaitingStore(ImageStore):
        def put(self, image: Image.Image) -> str:
            assert asked.wait(timeout=10), "the prompt was recorded before the request went out"
            return super().put(image)

    async def reply(request: object) -> None:
        asked.set()
        await asyncio.sleep(0.05)

    engine = AsyncScriptedEngine({"direct": SCRIPTS["direct"]}, before_reply=reply)
    with AgentLoop(engine, FakeSandbox(), store=WaitingStore(tmp_path)) as loop:
        (traj,) = loop.run([EpisodeSpec(sample("direct"))])
    assert traj.finish_reason == "answer" and traj.segments[0].role == "prompt"
    assert traj.segments[0].images and engine.requests[0].prompt_ids is None


def test_absorb_refuses_to_run_ahead_of_the_records() -> None:
    state = EpisodeState(
        EpisodeSpec(sample("direct")), get_format("thyme"), AgentConfig(), None, None, True
    )
    state.start([{"role": "user", "content": "direct q"}], [])
    state.request()
    with pytest.raises(RuntimeError, match="take_records"):
        state.absorb(GenerationResult(text="<answer>B</answer>", stop_reason="</answer>"))
    state.take_records()()
    state.absorb(GenerationResult(text="<answer>B</answer>", stop_reason="</answer>"))
    assert state.take_records() is None
    assert [s.role for s in state.trajectory.segments] == ["prompt", "generated"]


def test_an_episode_that_ends_before_its_next_request_still_has_its_records(
    tmp_path: Path,
) -> None:
    """A sandbox failure ends the episode right after an observation would be recorded; the
    records deferred until then run at the end (here: the prompt's, before the first reply)."""

    class BrokenSandbox(FakeSandbox):
        def session(self, images: object, deferred: bool = False) -> object:
            session = super().session(images, deferred)
            session.run = lambda code: (_ for _ in ()).throw(OSError("worker died"))
            return session

    engine = AsyncScriptedEngine({"zoom": SCRIPTS["zoom"]})
    with AgentLoop(engine, BrokenSandbox(), store=ImageStore(tmp_path)) as loop:
        (traj,) = loop.run([EpisodeSpec(sample("zoom"))])
    assert traj.finish_reason == "sandbox_error"
    assert shape(traj) == ["prompt", "text", "code"]
    assert traj.segments[0].images
