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
