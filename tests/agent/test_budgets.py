"""Per-episode budgets (`agent.max_images`, `agent.max_context_tokens`) and the engine's view
each generated segment records (`Segment.engine`)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from beacon.agent.config import AgentConfig
from beacon.agent.episode import EpisodeSpec, EpisodeState
from beacon.agent.formats import get_format
from beacon.agent.prompts import first_turn
from beacon.engines.base import GenerationResult
from beacon.sandbox.config import ExecResult
from beacon.types import EngineView, ids_fingerprint

from .test_state_machine import run, sample, thyme


def test_a_call_whose_images_pass_the_episode_budget_ends_it_unread() -> None:
    two = ExecResult(ok=True, images=[Image.new("RGB", (8, 8))] * 2)
    script = thyme("a()") + thyme("b()") + "<answer>B</answer>"
    traj, _, _ = run(script, results=[two], max_images=3)  # the input image + 2 = 3: read
    assert traj.finish_reason == "max_images" and traj.truncated
    assert [s.role for s in traj.segments].count("observation") == 1  # the second went unread
    assert len(traj.tool_calls) == 2
    within, _, _ = run(script, results=[two], max_images=5)
    assert within.finish_reason == "answer"


def state(tiny_model_path: Path, **config: object) -> EpisodeState:
    from beacon.engines.tokenizer import HFTokenizer

    tokenizer = HFTokenizer.from_pretrained(tiny_model_path)
    fmt = get_format("thyme")
    spec = EpisodeSpec(sample(), mode="tool")
    out = EpisodeState(spec, fmt, AgentConfig(**config), tokenizer, store=None)
    images = list(spec.sample.images)
    out.start(first_turn("s1 what?", images, fmt=fmt, tools=True, image_paths=["/x.png"]), images)
    return out


def test_the_context_budget_counts_prompt_and_observation_tokens(tiny_model_path: Path) -> None:
    s = state(tiny_model_path)
    prompt = len(s.ids)
    budgeted = state(tiny_model_path, max_context_tokens=prompt + 6)
    request = budgeted.request()
    assert request.sampling.max_new_tokens == 6 and request.sampling.logprobs
    ids = budgeted.tokenizer.encode("I think it is the red one, surely.")[:6]
    assert len(ids) == 6
    result = GenerationResult(
        budgeted.tokenizer.decode(ids), ids, finish_reason="length", prompt_ids=list(budgeted.ids)
    )
    budgeted.absorb(result)
    assert budgeted.done and budgeted.trajectory.finish_reason == "context_length"


def test_each_engine_call_records_what_the_engine_saw(tiny_model_path: Path) -> None:
    s = state(tiny_model_path)
    seen = [*s.ids, 101]  # the engine's own report of its context, and one token more
    ids = s.tokenizer.encode("<answer>B</answer>")
    s.absorb(GenerationResult("<answer>B</answer>", ids, prompt_ids=seen[:-1]))
    view = s.trajectory.segments[-1].engine
    assert view == EngineView(len(seen) - 1 + len(ids), 1, ids_fingerprint(seen[:-1] + ids))
    without = state(tiny_model_path)
    without.absorb(GenerationResult("<answer>B</answer>", ids))  # an engine that reports none
    assert without.trajectory.segments[-1].engine is None
