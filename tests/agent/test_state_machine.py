"""The episode state machine on a scripted engine: scripted model text -> expected segments,
tool calls and finish reasons. No model and no sandbox processes, so every rule is checked
exactly, including the two bugs of issue 7 §1 (an answer printed by code, an answer tag inside
code)."""

from __future__ import annotations

import asyncio

import pytest
from PIL import Image

from beacon.agent.config import AgentConfig
from beacon.agent.episode import EpisodeSpec
from beacon.agent.loop import AgentLoop
from beacon.sandbox.config import ExecResult
from beacon.types import Sample, Trajectory
from beacon.verify import extract_answer

from .fakes import AsyncScriptedEngine, FakeSandbox, ScriptedEngine


def sample(sample_id: str = "s1") -> Sample:
    image = Image.new("RGB", (32, 24), "white")
    return Sample(id=sample_id, images=[image], question=f"{sample_id} what is shown?", answer="B")


def thyme(code: str) -> str:
    return f"<code>\n```python\n{code}\n```\n</code>"


def run(
    script: str,
    *,
    mode: str = "tool",
    results: list[ExecResult] | None = None,
    engine: ScriptedEngine | None = None,
    **config: object,
) -> tuple[Trajectory, ScriptedEngine, FakeSandbox]:
    engine = engine or ScriptedEngine({"s1": script})
    sandbox = FakeSandbox(results or [ExecResult(ok=True, stdout="(32, 24)")])
    with AgentLoop(engine, sandbox, AgentConfig(**config)) as loop:
        (traj,) = loop.run([EpisodeSpec(sample(), mode=mode)])
    return traj, engine, sandbox


def shape(traj: Trajectory) -> list[str]:
    return [s.role if s.role != "generated" else s.kind for s in traj.segments]


def test_direct_answer() -> None:
    traj, engine, _ = run("It is a square. <answer>B</answer>")
    assert traj.finish_reason == "answer" and traj.final_answer == "B"
    assert shape(traj) == ["prompt", "text"]
    assert engine.requests[0].sampling.stop == ["</answer>", "</code>"]


def test_code_then_answer() -> None:
    script = "Zoom. " + thyme("print(image.size)") + "It is B. <answer>B</answer>"
    traj, engine, sandbox = run(script)
    assert traj.finish_reason == "answer" and traj.final_answer == "B"
    assert shape(traj) == ["prompt", "text", "code", "observation", "text"]
    assert traj.segments[1].text == "Zoom. <code>"
    assert traj.segments[3].text == "<sandbox_output>(32, 24)</sandbox_output>"
    (call,) = traj.tool_calls
    assert call.executed and call.ok and call.code == "print(image.size)"
    assert sandbox.sessions[0].ran == ["print(image.size)"] and sandbox.sessions[0].closed
    assert engine.requests[1].continue_final_message  # Thyme: same assistant turn


def test_answer_printed_by_code_is_not_the_models_answer() -> None:
    """Bug 1: the sandbox's output is not the model's text."""
    printed = ExecResult(ok=True, stdout="<answer>A</answer>")
    script = thyme("print(tagged('A'))") + "I cannot tell."
    traj, _, _ = run(script, results=[printed])
    assert traj.finish_reason == "stop"
    assert traj.final_answer is None
    assert "<answer>A</answer>" in traj.segments[3].text  # the model did see it
    assert extract_answer(traj.response_text) != "A"  # the verifier agrees: no answer A


def test_answer_tag_inside_code_is_code() -> None:
    """Bug 2: an answer tag in the code neither ends the episode nor stops the call."""
    code = "print('<answer>A</answer>')"
    traj, engine, sandbox = run("Check. " + thyme(code) + "So <answer>B</answer>")
    assert traj.finish_reason == "answer" and traj.final_answer == "B"
    assert sandbox.sessions[0].ran == [code]
    # the engine stopped at </answer> inside the code; the loop went on in the code
    assert engine.requests[0].sampling.stop == ["</answer>", "</code>"]
    assert engine.requests[1].sampling.stop == ["</code>"]
    assert shape(traj) == ["prompt", "text", "code", "code", "observation", "text"]
    assert "".join(s.text for s in traj.segments[2:4]).endswith("</code>")


def test_answer_tag_inside_tool_call_json_is_code() -> None:
    code = 'print(\\"<answer>A</answer>\\")'
    call = '<tool_call>{"name": "python", "arguments": {"code": "' + code + '"}}</tool_call>'
    traj, _, sandbox = run(call + "<answer>B</answer>", format="tool_call")
    assert traj.finish_reason == "answer" and traj.final_answer == "B"
    assert sandbox.sessions[0].ran == ['print("<answer>A</answer>")']
    observation = traj.segments[-2]
    assert observation.text.startswith("<|im_end|>\n<|im_start|>user\n<tool_response>\n")
    assert observation.text.endswith("\n</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_notool_records_the_attempt_and_reads_past_an_answer_in_code() -> None:
    script = thyme("print('<answer>A</answer>')") + " <answer>B</answer>"
    traj, _, sandbox = run(script, mode="notool")
    assert traj.finish_reason == "answer" and traj.final_answer == "B"
    assert not sandbox.sessions
    (attempt,) = traj.tool_calls
    assert not attempt.executed and "<answer>A</answer>" in attempt.code
    assert shape(traj) == ["prompt", "text", "text"]


def test_a_call_continued_over_many_requests_shares_its_turns_budget() -> None:
    """A model repeating the answer tag inside code (seen in `beacon demo`): each repeat ends a
    request, and the code goes on; the turn's budget, not the episode's, must end it."""
    traj, engine, _ = run("<code>\n" + "</answer>" * 500, mode="notool", max_new_tokens_per_turn=40)
    assert traj.finish_reason == "max_tokens"
    assert len(engine.requests) <= 21  # 2 tokens per request (9 characters), 40 in the turn
    assert all(r.sampling.max_new_tokens <= 40 for r in engine.requests)


def test_tool_call_carries_what_the_sandbox_reported() -> None:
    result = ExecResult(
        ok=True,
        stdout="done",
        notes=["9 images returned; only the first 8 kept"],
        repairs=["clamped crop box"],
        code="image.crop((0, 0, 32, 24))",
    )
    traj, _, _ = run(thyme("image.crop((0, 0, 99, 99))") + "<answer>B</answer>", results=[result])
    (call,) = traj.tool_calls
    assert call.code == "image.crop((0, 0, 99, 99))"
    assert call.executed_code == "image.crop((0, 0, 32, 24))"
    assert call.repairs == ["clamped crop box"]
    assert call.notes == ["9 images returned; only the first 8 kept"]
    observation = traj.segments[3].text
    assert "Note: 9 images returned; only the first 8 kept" in observation
    assert "clamped" not in observation  # repairs are for training data, not for the model
    assert Trajectory.from_json(traj.to_json()).tool_calls[0] == call


def test_executed_code_falls_back_to_the_written_code() -> None:
    traj, _, _ = run(thyme("print(1)") + "<answer>B</answer>")
    assert traj.tool_calls[0].executed_code == "print(1)"


def test_code_error_is_an_observation() -> None:
    failed = ExecResult(ok=False, error="ZeroDivisionError: division by zero (line 1)")
    traj, _, _ = run(thyme("1 / 0") + "<answer>B</answer>", results=[failed])
    assert traj.finish_reason == "answer"
    assert "Error: ZeroDivisionError" in traj.segments[3].text


def test_malformed_call_is_shown_and_not_executed() -> None:
    traj, _, sandbox = run(
        '<tool_call>{"name": "python"}</tool_call><answer>B</answer>', format="tool_call"
    )
    assert not traj.tool_calls[0].executed and "malformed" in traj.tool_calls[0].error
    assert not sandbox.sessions[0].ran and traj.finish_reason == "answer"


def test_close_tag_without_open_tag_is_a_malformed_call() -> None:
    traj, _, sandbox = run("print(1)\n```\n</code><answer>B</answer>")
    assert not traj.tool_calls[0].executed and "without an opening" in traj.tool_calls[0].error
    assert not sandbox.sessions[0].ran and traj.finish_reason == "answer"


def test_stray_close_tag_after_a_call_does_not_rerun_the_earlier_call() -> None:
    traj, _, sandbox = run(thyme("print(1)") + "and again </code><answer>B</answer>")
    assert [c.executed for c in traj.tool_calls] == [True, False]
    assert sandbox.sessions[0].ran == ["print(1)"]
    assert traj.tool_calls[1].code == "and again </code>"


@pytest.mark.parametrize(
    ("config", "reason", "calls"),
    [
        ({"max_tool_calls": 1}, "max_tool_calls", 1),
        ({"max_turns": 2}, "max_turns", 1),
        ({"max_turns": 3, "max_tool_calls": 5}, "max_turns", 2),
    ],
)
def test_limits_end_the_episode(config: dict, reason: str, calls: int) -> None:
    traj, _, _ = run(thyme("print(1)") * 5, **config)
    assert traj.finish_reason == reason and traj.num_tool_calls == calls


def test_token_budget() -> None:
    traj, _, _ = run("word " * 100, max_new_tokens_per_turn=8)
    assert traj.finish_reason == "max_tokens" and len(traj.segments[1].text) == 32


def test_running_out_of_tokens_inside_the_answer_keeps_the_partial_answer() -> None:
    traj, _, _ = run("<answer>a long answer that goes on", max_new_tokens_per_turn=4)
    assert traj.finish_reason == "max_tokens"
    assert traj.final_answer == "<answer>a long answer that goes on"[8:16]


def test_end_of_turn_without_answer_is_stop() -> None:
    traj, _, _ = run("I do not know.")
    assert traj.finish_reason == "stop" and traj.final_answer is None


def test_end_of_sequence_inside_code_is_stop() -> None:
    traj, _, sandbox = run("<code>\n```python\nprint(1)")
    assert traj.finish_reason == "stop" and not sandbox.sessions[0].ran


def test_engine_error() -> None:
    engine = ScriptedEngine({"s1": "x"}, errors={"s1"})
    traj, _, _ = run("", engine=engine)
    assert traj.finish_reason == "engine_error" and "boom" in traj.error


def test_code_temperature_splits_code_into_its_own_request() -> None:
    script = "Zoom. " + thyme("print(1)") + "<answer>B</answer>"
    traj, engine, _ = run(script, temperature=1.0, code_temperature=0.0)
    first, code, after = engine.requests[:3]
    assert first.sampling.stop == ["</answer>", "<code>"] and first.sampling.temperature == 1.0
    assert code.sampling.stop == ["</code>"] and code.sampling.temperature == 0.0
    assert after.sampling.temperature == 1.0
    assert shape(traj) == ["prompt", "text", "code", "observation", "text"]


def test_request_seeds_depend_only_on_the_episode_seed_and_the_request_number() -> None:
    script = thyme("print(1)") + "<answer>B</answer>"
    seeds = []
    for _ in range(2):
        engine = ScriptedEngine({"s1": script})
        with AgentLoop(engine, FakeSandbox(), AgentConfig(temperature=1.0)) as loop:
            loop.run([EpisodeSpec(sample(), mode="tool", seed=11)])
        seeds.append([r.sampling.seed for r in engine.requests])
    assert seeds[0] == seeds[1] and len(set(seeds[0])) == len(seeds[0]) == 2


def test_episodes_are_independent_tasks() -> None:
    """The fast episode's second turn is requested while the slow episode's first request is
    still waiting: no lockstep. (In lockstep this would wait forever; the test times out.)"""
    second_turn_of_fast = asyncio.Event()

    async def before_reply(request) -> None:
        if request.messages[1]["content"][-1]["text"].startswith("slow"):
            await second_turn_of_fast.wait()
        elif request.continue_final_message:
            second_turn_of_fast.set()

    script = thyme("print(1)") + "<answer>B</answer>"
    engine = AsyncScriptedEngine({"slow": script, "fast": script}, before_reply)
    specs = [EpisodeSpec(sample("slow")), EpisodeSpec(sample("fast"))]

    async def main() -> list[str]:
        with AgentLoop(engine, FakeSandbox()) as loop:
            stream = loop.astream(specs, max_active=2)
            return [spec.sample.id async for spec, _ in stream]

    assert asyncio.run(asyncio.wait_for(main(), timeout=60)) == ["fast", "slow"]


def test_stream_closed_early_cancels_the_rest() -> None:
    engine = ScriptedEngine({str(i): "<answer>B</answer>" for i in range(6)})
    with AgentLoop(engine, FakeSandbox()) as loop:
        stream = loop.stream([EpisodeSpec(sample(str(i))) for i in range(6)], max_active=2)
        first = next(stream)
        stream.close()
    assert first[1].finish_reason == "answer"


def test_missing_sandbox_is_a_clear_error() -> None:
    with (
        AgentLoop(ScriptedEngine({"s1": "x"}), None) as loop,
        pytest.raises(ValueError, match="no sandbox"),
    ):
        loop.run([EpisodeSpec(sample(), mode="tool")])
