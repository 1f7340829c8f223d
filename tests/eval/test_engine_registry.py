"""The engine registry as `beacon eval` and `beacon run` use it: build from an EngineConfig."""

from __future__ import annotations

from pathlib import Path

import pytest

from beacon.engines import EngineConfig, build_engine
from beacon.errors import UserError


def test_openai_engine_loads_the_tokenizer_of_a_local_served_model(tiny_model_path: Path) -> None:
    """The README tour serves /tmp/tiny and names it as the model: token ids come for free."""
    url = "http://127.0.0.1:1/v1"
    local = build_engine(EngineConfig(name="openai", model=str(tiny_model_path), base_url=url))
    assert local.tokenizer is not None
    remote = build_engine(EngineConfig(name="openai", model="served-name", base_url=url))
    assert remote.tokenizer is None
    local.close()
    remote.close()


def test_a_missing_local_model_is_refused_before_loading() -> None:
    with pytest.raises(UserError, match=r"engine\.model=/missing/ckpt: no such folder"):
        build_engine(EngineConfig(name="hf", model="/missing/ckpt"))


def test_the_openai_engine_holds_as_many_requests_as_eval_has_episodes_in_flight() -> None:
    """A fixed request limit below --concurrency capped `beacon eval` at its own pace (16
    requests: 32 two-turn episodes a second at 250 ms a turn, with 16 or 64 in flight)."""
    from beacon.config import load_config
    from beacon.engines.base import DEFAULT_CONCURRENCY
    from beacon.eval.config import EvalConfig

    url = "http://127.0.0.1:1/v1"
    lifted = load_config(EvalConfig, overrides=["concurrency=64", "engine.name=openai"])
    assert lifted.engine.concurrency == 64
    engine = build_engine(lifted.engine.model_copy(update={"model": "served", "base_url": url}))
    assert engine.concurrency == 64
    engine.close()
    spared = load_config(EvalConfig, overrides=["concurrency=64", "engine.concurrency=4"])
    assert spared.engine.concurrency == 4
    elsewhere = build_engine(EngineConfig(name="openai", model="served", base_url=url))
    assert elsewhere.concurrency == DEFAULT_CONCURRENCY
    elsewhere.close()
