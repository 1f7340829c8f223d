"""The openai engine against a server that behaves like a hosted API: any request field the
public OpenAI API does not define is a 400 ("Unrecognized request argument supplied: top_k").
`vllm_extensions` auto drops vLLM's fields after the first such 400 and says so once; off never
sends them; on (training rollouts, which need token ids) fails with an error that says why."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi import Request

from beacon.engines.base import GenerationRequest, SamplingParams
from beacon.engines.openai import VLLM_FIELDS, OpenAIEngine
from beacon.engines.scripted_server import chat_app
from beacon.engines.serve import run_app_in_thread


@dataclass
class Seen:
    """What the server saw: each reply's status, and the bodies it answered."""

    statuses: list[int] = field(default_factory=list)
    bodies: list[dict] = field(default_factory=list)


def _hosted(seen: Seen, openai_fields_only: bool) -> Iterator[str]:
    def reply(body: dict) -> str:
        seen.bodies.append(body)
        return "fine"

    app = chat_app(reply, "m", openai_fields_only=openai_fields_only)

    @app.middleware("http")
    async def record(request: Request, call_next: Any) -> Any:
        response = await call_next(request)
        if request.url.path.endswith("/chat/completions"):
            seen.statuses.append(response.status_code)
        return response

    handle = run_app_in_thread(app)
    try:
        yield handle.base_url
    finally:
        handle.stop()


@pytest.fixture()
def hosted() -> Iterator[tuple[str, Seen]]:
    seen = Seen()
    for url in _hosted(seen, openai_fields_only=True):
        yield url, seen


@pytest.fixture()
def vllm_like() -> Iterator[tuple[str, Seen]]:
    seen = Seen()
    for url in _hosted(seen, openai_fields_only=False):
        yield url, seen


def _continued_turn() -> GenerationRequest:
    """A request that uses every extension: top_k and a continued assistant message."""
    return GenerationRequest(
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<code>"}],
        SamplingParams(max_new_tokens=4, top_k=5),
        continue_final_message=True,
    )


def _vllm_fields(body: dict) -> set[str]:
    return set(body) & set(VLLM_FIELDS)


def test_auto_drops_the_fields_after_the_first_refusal_and_warns_once(hosted, caplog):
    base_url, seen = hosted
    engine = OpenAIEngine(base_url, "m", concurrency=1)
    with caplog.at_level(logging.WARNING, logger="beacon.engines.openai"):
        first = engine.generate([_continued_turn(), _continued_turn()])
        later = engine.generate([_continued_turn()])
    engine.close()
    assert [r.text for r in first + later] == ["fine"] * 3
    assert seen.statuses == [400, 200, 200, 200], "one refusal, then none: no probe per request"
    assert all(not _vllm_fields(body) for body in seen.bodies)
    warnings = [r for r in caplog.records if "return_token_ids" in r.getMessage()]
    assert len(warnings) == 1 and "vllm_extensions=off" in warnings[0].getMessage()


def test_off_sends_only_openai_fields_from_the_first_request(hosted, caplog):
    base_url, seen = hosted
    engine = OpenAIEngine(base_url, "m", vllm_extensions="off")
    with caplog.at_level(logging.WARNING, logger="beacon.engines.openai"):
        [result] = engine.generate([_continued_turn()])
    engine.close()
    assert result.text == "fine" and seen.statuses == [200] and not caplog.records


def test_on_fails_saying_the_server_cannot_give_token_ids(hosted):
    base_url, seen = hosted
    engine = OpenAIEngine(base_url, "m", vllm_extensions="on")
    [result] = engine.generate([_continued_turn()])
    engine.close()
    assert result.finish_reason == "error" and seen.statuses == [400]
    assert "Unrecognized request argument" in result.error, "the server's own words"
    assert "needs token ids" in result.error and "beacon serve" in result.error


def test_auto_keeps_the_fields_where_the_server_takes_them(vllm_like):
    """A vLLM server: every request keeps the extensions (token ids, top_k, continuation)."""
    base_url, seen = vllm_like
    engine = OpenAIEngine(base_url, "m")
    engine.generate([_continued_turn()])
    engine.generate([_continued_turn()])
    engine.close()
    assert seen.statuses == [200, 200]
    assert all(_vllm_fields(body) == set(VLLM_FIELDS) - {"return_tokens_as_token_ids"}
               for body in seen.bodies)  # fmt: skip


def test_grpo_rollout_servers_refuse_a_server_without_token_ids(hosted, tiny_model_path: Path):
    """Training needs token ids: GRPO's rollout engines send the fields always (on), so a
    hosted API fails every request with the reason instead of training on text."""
    from beacon.train.core.setup import rollout_engine
    from beacon.train.grpo.config import GRPOConfig

    base_url, _ = hosted
    cfg = GRPOConfig.model_validate(
        {
            "model": {"path": str(tiny_model_path)},
            "train": {"output_dir": "unused"},
            "rollout": {"servers": [base_url]},
        }
    )
    engine = rollout_engine(cfg.model.path, cfg.rollout, "cpu", batch_size=1).engine
    [result] = engine.generate([_continued_turn()])
    engine.close()
    assert result.finish_reason == "error" and "needs token ids" in result.error


@pytest.mark.parametrize(("setting", "refused"), [("off", False), ("auto", False), ("on", True)])
def test_the_opd_critic_takes_critic_vllm_extensions(
    hosted, tiny_model_path: Path, setting: str, refused: bool
) -> None:
    """OPD's critic client is built with critic.vllm_extensions (off by default: the critic's
    text is all that is read)."""
    import asyncio
    import contextlib

    from beacon.train.opd.config import OPDConfig
    from beacon.train.opd.critic import CriticRequest
    from beacon.train.opd.recipe import make_critic

    base_url, seen = hosted
    cfg = OPDConfig.model_validate(
        {
            "model": {"path": str(tiny_model_path)},
            "teacher": {"path": str(tiny_model_path)},
            "train": {"output_dir": "unused"},
            "critic": {"base_url": base_url, "vllm_extensions": setting},
        }
    )
    assert OPDConfig.model_fields["critic"].default_factory().vllm_extensions == "off"
    request = CriticRequest("group", [{"role": "user", "content": "q"}], frozenset(), ["r0"])
    with contextlib.ExitStack() as stack:
        critic = make_critic(cfg, [], stack)

        async def ask() -> str:
            try:
                return await critic(request)
            finally:
                await critic.aclose()

        if refused:
            with pytest.raises(RuntimeError, match="needs token ids"):
                asyncio.run(ask())
        else:
            assert asyncio.run(ask()) == "fine"
    assert seen.statuses[0] == (400 if setting != "off" else 200)
