"""Every way an episode can go wrong ends with the right recorded reason, never an exception."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from beacon.agent.config import AgentConfig
from beacon.agent.episode import EpisodeSpec
from beacon.agent.loop import AgentLoop
from beacon.engines.hf import HFEngine
from beacon.engines.openai import OpenAIEngine
from beacon.sandbox import Sandbox, SandboxConfig
from beacon.types import Sample, Trajectory

ANSWER = "So: <answer>C</answer>"


def thyme(code: str, prefix: str = "Try. ") -> str:
    return f"{prefix}<code>\n```python\n{code}\n```\n</code>"


@pytest.fixture(scope="module")
def engine(tiny_model_path: Path) -> HFEngine:
    return HFEngine(tiny_model_path, batch_size=4)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(SandboxConfig(timeout_s=1.0, num_workers=2)) as sb:
        yield sb


@pytest.fixture
def sample() -> Sample:
    return Sample(id="f", images=[Image.new("RGB", (64, 48), "white")], question="?", answer="C")


def run_scripted(
    engine: HFEngine,
    sandbox: Sandbox | None,
    sample: Sample,
    turn_script: type,
    turns: list[str],
    marker: str = "</sandbox_output>",
    eos: bool = True,
    **config: object,
) -> Trajectory:
    tok = engine.tokenizer
    ids = [tok.encode(t) for t in turns]
    if eos:
        ids[-1] = [*ids[-1], *tok.eos_token_ids[-1:]]
    engine.logits_processors = [turn_script(ids, tok.encode(marker)[0])]
    agent = AgentConfig(**{"max_new_tokens_per_turn": 200, **config})
    with AgentLoop(engine, sandbox, agent) as loop:
        (traj,) = loop.run([EpisodeSpec(sample, mode="tool")])
    return traj


def test_code_error_becomes_an_observation(engine, sandbox, sample, turn_script) -> None:
    traj = run_scripted(engine, sandbox, sample, turn_script, [thyme("1 / 0"), ANSWER])
    assert traj.finish_reason == "answer" and traj.final_answer == "C"
    (call,) = traj.tool_calls
    assert call.executed and not call.ok and "ZeroDivisionError" in call.error
    observation = next(s for s in traj.segments if s.role == "observation")
    assert "Error: " in observation.text and "ZeroDivisionError" in observation.text


def test_sandbox_timeout_becomes_an_observation(engine, sandbox, sample, turn_script) -> None:
    traj = run_scripted(
        engine, sandbox, sample, turn_script, [thyme("while True:\n    pass"), ANSWER]
    )
    assert traj.finish_reason == "answer"
    (call,) = traj.tool_calls
    assert call.timed_out and not call.ok
    assert "Error:" in next(s.text for s in traj.segments if s.role == "observation")


def test_malformed_tool_call_is_shown_to_the_model(engine, sandbox, sample, turn_script) -> None:
    turns = ['<tool_call>{"name": "python", "arguments": {code: 1}}</tool_call>', ANSWER]
    traj = run_scripted(
        engine, sandbox, sample, turn_script, turns, marker="</tool_response>", format="tool_call"
    )
    assert traj.finish_reason == "answer"
    (call,) = traj.tool_calls
    assert not call.executed and "malformed tool call" in call.error
    assert not traj.used_tool and traj.attempted_tool_calls == 1


def test_max_turns(engine, sandbox, sample, turn_script) -> None:
    traj = run_scripted(
        engine, sandbox, sample, turn_script, [thyme("print(1)")], eos=False, max_turns=2
    )
    assert traj.finish_reason == "max_turns"
    assert traj.num_tool_calls == 1  # the second call would leave no turn to read its result


def test_max_tool_calls(engine, sandbox, sample, turn_script) -> None:
    traj = run_scripted(
        engine, sandbox, sample, turn_script, [thyme("print(1)")], eos=False, max_tool_calls=1
    )
    assert traj.finish_reason == "max_tool_calls" and traj.num_tool_calls == 1


def test_max_total_tokens(engine, sandbox, sample, turn_script) -> None:
    traj = run_scripted(
        engine, sandbox, sample, turn_script, ["word " * 50], max_total_new_tokens=7
    )
    assert traj.finish_reason == "max_tokens" and traj.response_tokens == 7


def test_end_of_turn_without_answer_is_stop(engine, sandbox, sample, turn_script) -> None:
    traj = run_scripted(engine, sandbox, sample, turn_script, ["I give up."])
    assert traj.finish_reason == "stop" and traj.final_answer is None


def test_undecodable_image_is_an_input_error(engine, sandbox, turn_script) -> None:
    bad = Sample(id="bad", images=[b"\x89PNG\r\n\x1a\nnot really"], question="?", answer="C")
    traj = run_scripted(engine, sandbox, bad, turn_script, [ANSWER])
    assert traj.finish_reason == "input_error" and "image" in traj.error


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_is_an_engine_error(sample) -> None:
    engine = OpenAIEngine(
        base_url=f"http://127.0.0.1:{_free_port()}/v1", model="m", max_retries=0, timeout_s=2
    )
    with AgentLoop(engine, None) as loop:
        (traj,) = loop.run([EpisodeSpec(sample, mode="notool")])
    assert traj.finish_reason == "engine_error" and traj.error


class _SlowHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        time.sleep(3)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_engine_timeout_is_an_engine_error(sample) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/v1"
        engine = OpenAIEngine(base_url=base, model="m", max_retries=0, timeout_s=0.5)
        with AgentLoop(engine, None) as loop:
            (traj,) = loop.run([EpisodeSpec(sample, mode="notool")])
    finally:
        server.shutdown()
    assert traj.finish_reason == "engine_error"
    assert "timeout" in traj.error.lower() or "timed out" in traj.error.lower()


def test_model_cannot_write_image_placeholders(engine, sample) -> None:
    """A model that prefers an image pad token never gets to write it: a pad without an image
    in the context would make the episode's next turn impossible to run."""
    tok = engine.tokenizer
    assert tok.vision_token_ids

    def prefer_pads(input_ids, scores):
        scores = scores.clone()
        scores[:, tok.vision_token_ids] += 1000.0
        return scores

    engine.logits_processors = [prefer_pads]
    agent = AgentConfig(max_new_tokens_per_turn=16, max_total_new_tokens=16)
    with AgentLoop(engine, None, agent) as loop:
        (traj,) = loop.run([EpisodeSpec(sample, mode="notool")])
    assert traj.finish_reason == "max_tokens" and traj.error is None
    generated = traj.segments[1].token_ids
    assert len(generated) == 16 and not set(generated) & set(tok.vision_token_ids)
