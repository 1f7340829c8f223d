"""The inference gate of `gated` mode (beacon.agent.gate).

- p_tool on the tiny model equals a direct computation: the processor's inputs, one forward
  pass, log-softmax of the last logits in float64, for a one-token marker (Thyme's "<code>" in
  the tiny tokenizer) and a three-token one (its last piece merged with what follows).
- Routing: below the threshold the episode runs notool, at or above it tool (scripted engine).
- The served path (`beacon serve` + openai, top-20 log-probs) agrees with the exact hf path.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field, replace

import pytest
import torch
from PIL import Image

from beacon.agent.config import AgentConfig
from beacon.agent.episode import EpisodeSpec
from beacon.agent.formats import THYME, TOOL_CALL, Format
from beacon.agent.gate import GateError, ToolGate, marker_tokens, p_tool_of, route
from beacon.agent.loop import AgentLoop
from beacon.agent.prompts import first_turn
from beacon.engines.base import GenerationRequest
from beacon.engines.scoring import ScoreRequest, ScoreResult, ascore
from beacon.errors import UserError
from beacon.types import GateDecision, Sample, Trajectory

from .fakes import FakeSandbox, ScriptedEngine, sample_of

# A marker the tiny tokenizer writes as three tokens: "```", "python", "\n".
FENCED = replace(THYME, name="fenced", call_open="```python\n", call_close="```\n")


# ------------------------------------------------------------------------------- pure parts
def test_p_tool_is_prefix_product_times_completion_sum() -> None:
    result = ScoreResult(
        logprobs=[math.log(0.5), math.log(0.8)],
        candidate_logprobs=[math.log(0.3), math.log(0.2)],
    )
    assert p_tool_of(result) == pytest.approx(0.5 * 0.8 * (0.3 + 0.2), abs=1e-15)


def test_unseen_tokens_count_as_zero() -> None:
    assert p_tool_of(ScoreResult(logprobs=[None], candidate_logprobs=[0.0])) == 0.0
    seen = ScoreResult(logprobs=[], candidate_logprobs=[math.log(0.25), None])
    assert p_tool_of(seen) == pytest.approx(0.25, abs=1e-15)


def test_route_below_threshold_is_notool_at_or_above_is_tool() -> None:
    assert route(0.6999, 0.7) == "notool"
    assert route(0.7, 0.7) == "tool"
    assert route(0.95, 0.7) == "tool"
    assert route(0.0, 0.0) == "tool"  # threshold 0: always the tool path


# ---------------------------------------------------------------------- tiny model: exact
@pytest.fixture(scope="module")
def hf(tiny_model_path):
    from beacon.engines import load_engine

    engine = load_engine("hf", str(tiny_model_path), device="cpu", batch_size=4)
    yield engine
    engine.close()


def opening(question: str, size: tuple[int, int] = (64, 48), fmt: Format = THYME):
    image = Image.new("RGB", size, (200, 30, 30))
    paths = ["/mnt/data/inputs/image_0.png"]
    return first_turn(question, [image], fmt=fmt, tools=True, image_paths=paths), [image]


def direct_logprobs(hf, messages, images, forced: list[int]) -> torch.Tensor:
    """log softmax (float64) of the logits after `forced`, one unpadded forward pass; [V]."""
    tokenizer = hf.tokenizer
    text = tokenizer.render_chat(messages, add_generation_prompt=True)
    inputs = tokenizer.processor(text=[text], images=images, return_tensors="pt")
    ids = torch.cat([inputs["input_ids"], torch.tensor([forced], dtype=torch.long)], dim=1)
    inputs["input_ids"] = ids
    inputs["attention_mask"] = torch.ones_like(ids)
    inputs["mm_token_type_ids"] = (ids == tokenizer.image_token_id).to(torch.int)
    with torch.no_grad():
        logits = hf.model(**inputs).logits[0, -(len(forced) + 1) :]
    return logits.double().log_softmax(dim=-1)  # [len(forced) + 1, V]


def test_single_token_markers_of_the_tiny_tokenizer(hf) -> None:
    for fmt in (THYME, TOOL_CALL):
        marker = marker_tokens(hf.tokenizer, fmt.call_open)
        (token,) = hf.tokenizer.encode(fmt.call_open)
        assert marker.prefix == [] and marker.last == fmt.call_open
        assert token in marker.completions


def test_p_tool_equals_direct_log_softmax_for_thyme(hf) -> None:
    messages, images = opening("What color is the square?")
    p_tool = asyncio.run(ToolGate(hf, THYME, 0.7).p_tool(messages, images))
    logp = direct_logprobs(hf, messages, images, forced=[])[-1]
    expected = sum(
        math.exp(logp[v]) for v in range(len(logp)) if hf.tokenizer.decode([v]).startswith("<code>")
    )
    # float32 logits in the engine vs float64 here: relative error ~1e-6
    assert p_tool == pytest.approx(expected, rel=1e-5)


def test_p_tool_of_a_three_token_marker_sums_merges_of_its_last_piece(hf) -> None:
    marker = marker_tokens(hf.tokenizer, FENCED.call_open)
    assert len(marker.prefix) == 2 and marker.last == "\n"
    merges = [v for v in range(len(hf.tokenizer.tokenizer)) if hf.tokenizer.decode([v])[:1] == "\n"]
    assert sorted(marker.completions) == merges and len(merges) > 1

    messages, images = opening("How many dots?", fmt=FENCED)
    p_tool = asyncio.run(ToolGate(hf, FENCED, 0.7).p_tool(messages, images))
    logp = direct_logprobs(hf, messages, images, forced=marker.prefix)
    head = logp[0, marker.prefix[0]] + logp[1, marker.prefix[1]]
    tail = sum(math.exp(logp[2, v]) for v in merges)
    assert p_tool == pytest.approx(math.exp(head) * tail, rel=1e-5)


def test_batched_scoring_equals_one_by_one(hf) -> None:
    """Left padding must not move any row's log-probs (rows of different lengths)."""
    gate = ToolGate(hf, FENCED, 0.7)
    openings = [opening("Short?", (32, 32), FENCED), opening("A longer question " * 6, fmt=FENCED)]

    async def both() -> list[float]:
        return list(await asyncio.gather(*(gate.p_tool(m, i) for m, i in openings)))

    alone = [asyncio.run(gate.p_tool(m, i)) for m, i in openings]
    requests = [
        ScoreRequest(GenerationRequest(messages=m), gate.marker.prefix, gate.marker.completions)
        for m, _ in openings
    ]
    batched = [p_tool_of(r) for r in hf.score(requests)]
    assert batched == pytest.approx(alone, rel=1e-5)
    assert asyncio.run(both()) == pytest.approx(alone, rel=1e-5)


def test_served_top_logprobs_agree_with_exact_scoring(hf) -> None:
    """The generate path (`beacon serve` + openai: one request per position, top-20 log-probs
    by token id) reads the same numbers as the exact hf pass. The random tiny model puts no
    marker token in its top 20, so the test scores tokens that are there: a two-token prefix
    of likely plain-text tokens, then the five likeliest next tokens."""
    from beacon.engines.openai import OpenAIEngine
    from beacon.engines.serve import serving

    messages, images = opening("What is written?")
    context = GenerationRequest(messages=messages)
    vocabulary = range(len(hf.tokenizer.tokenizer))
    prefix: list[int] = []
    for _ in range(2):
        (full,) = hf.score([ScoreRequest(context, prefix, list(vocabulary))])
        ranked = sorted(vocabulary, key=lambda v: -full.candidate_logprobs[v])
        prefix.append(next(v for v in ranked[:20] if plain(hf.tokenizer, [*prefix, v])))
    (full,) = hf.score([ScoreRequest(context, prefix, list(vocabulary))])
    top5 = sorted(vocabulary, key=lambda v: -full.candidate_logprobs[v])[:5]
    request = ScoreRequest(context, prefix, top5)
    (local,) = hf.score([request])
    with serving(hf) as base_url:
        client = OpenAIEngine(base_url=base_url, model="beacon", tokenizer=hf.tokenizer)
        try:
            (over_http,) = asyncio.run(ascore(client, [request]))
            gate = ToolGate(client, THYME, 0.7)
            p_served = asyncio.run(gate.p_tool(messages, images))
        finally:
            client.close()
    assert over_http.error is None
    assert over_http.logprobs == pytest.approx(local.logprobs, abs=1e-4)
    assert over_http.candidate_logprobs == pytest.approx(local.candidate_logprobs, abs=1e-4)
    exact = asyncio.run(ToolGate(hf, THYME, 0.7).p_tool(messages, images))
    assert 0.0 <= p_served <= exact + 1e-6  # tokens outside the top 20 count 0: a lower bound


def plain(tokenizer, ids: list[int]) -> bool:
    """Plain text that a server re-tokenizes into the same ids (no special token, no merge)."""
    text = tokenizer.decode(ids)
    special = set(tokenizer.tokenizer.all_special_ids) | set(tokenizer.vision_token_ids)
    clean = text.strip() == text and "\ufffd" not in text and not special & set(ids)
    return clean and tokenizer.encode(text) == ids


def test_gate_needs_a_tokenizer() -> None:
    with pytest.raises(UserError, match=r"engine\.tokenizer"):
        ToolGate(ScriptedEngine({}), THYME, 0.7)


# --------------------------------------------------------------- routing (scripted engine)
@dataclass
class FixedGate:
    """A gate whose p_tool per sample is given (the sample id is the question's first word)."""

    p_tools: dict[str, float]
    threshold: float = 0.7
    seen: list[list] = field(default_factory=list)
    fail: bool = False

    async def decide(self, messages, images) -> GateDecision:
        self.seen.append(messages)
        if self.fail:
            raise GateError("the gate could not score p_tool: HTTP 500")
        user = next(m for m in messages if m["role"] == "user")
        sample_id = next(p["text"] for p in user["content"] if p["type"] == "text").split()[0]
        p = self.p_tools[sample_id]
        return GateDecision(p, self.threshold, route(p, self.threshold))


def gated_run(p_tools: dict[str, float], fail: bool = False):
    scripts = {
        sid: "<code>\n```python\nprint(1)\n```\n</code><answer>B</answer>" for sid in p_tools
    }
    engine, sandbox = ScriptedEngine(scripts), FakeSandbox()
    gate = FixedGate(p_tools, fail=fail)
    image = Image.new("RGB", (32, 24), "white")
    specs = [
        EpisodeSpec(Sample(id=sid, images=[image], question=f"{sid} what?", answer="B"), "gated")
        for sid in p_tools
    ]
    with AgentLoop(engine, sandbox, AgentConfig(), gate=gate) as loop:
        trajectories = dict(zip(p_tools, loop.run(specs), strict=True))
    return trajectories, engine, sandbox, gate


def test_below_threshold_runs_notool_at_threshold_runs_tool() -> None:
    trajectories, engine, sandbox, gate = gated_run({"low": 0.69, "edge": 0.7, "high": 0.9})
    low, edge, high = trajectories["low"], trajectories["edge"], trajectories["high"]
    assert (low.mode, edge.mode, high.mode) == ("notool", "tool", "tool")
    assert [t.gate.path for t in (low, edge, high)] == ["notool", "tool", "tool"]
    assert low.gate.p_tool == 0.69 and low.gate.threshold == 0.7
    # notool: no tool instructions, the code is only an attempt; tool: it ran
    assert low.tool_calls[0].executed is False and not low.used_tool
    assert edge.used_tool and high.used_tool
    low_prompt = next(r for r in engine.requests if sample_of(r) == "low")
    assert all(m["role"] != "system" for m in low_prompt.messages)
    # the gate scored the tool-mode opening: system prompt with the tool instructions
    assert all(messages[0]["role"] == "system" for messages in gate.seen)
    assert all(session.closed for session in sandbox.sessions)
    assert len(sandbox.sessions) == 3  # each episode opened one; the notool path closed it unused


def test_a_gate_that_cannot_score_ends_the_episode_as_engine_error() -> None:
    trajectories, engine, _, _ = gated_run({"s1": 0.9}, fail=True)
    assert trajectories["s1"].finish_reason == "engine_error"
    assert "could not score" in trajectories["s1"].error
    assert engine.requests == []  # nothing generated


def test_gate_decision_survives_json() -> None:
    trajectories, *_ = gated_run({"s1": 0.2})
    again = Trajectory.from_json(trajectories["s1"].to_json())
    assert again.gate == trajectories["s1"].gate and again.mode == "notool"
