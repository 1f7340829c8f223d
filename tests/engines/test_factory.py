"""`load_engine` by name, and the vLLM import guard."""

from __future__ import annotations

import importlib.util

import pytest

from beacon.engines import load_engine
from beacon.engines.base import ChatTokenizer, Engine


def test_hf_engine_meets_the_protocols(tiny_dir):
    engine = load_engine("hf", str(tiny_dir("qwen2_vl")), batch_size=2)
    assert isinstance(engine, Engine) and isinstance(engine.tokenizer, ChatTokenizer)
    assert engine.name == "hf" and engine.batch_size == 2


def test_openai_engine_needs_base_url():
    with pytest.raises(ValueError, match="base_url"):
        load_engine("openai", "m")
    engine = load_engine("openai", "m", base_url="http://127.0.0.1:1/v1")
    assert isinstance(engine, Engine) and engine.tokenizer is None


def test_unknown_engine_names_the_choices():
    with pytest.raises(ValueError, match="hf, vllm, openai"):
        load_engine("tgi", "m")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_vllm_engine_without_vllm_says_how_to_install(tiny_dir):
    with pytest.raises(ImportError, match=r"pip install beacon-vr\[vllm\]"):
        load_engine("vllm", str(tiny_dir("qwen2_vl")))


def test_vllm_token_prompt_collapses_each_image_run():
    from beacon.engines.vllm import vllm_token_prompt

    pad = 9
    ids = [pad, pad, 1, 2, pad, pad, pad, 3, pad]
    prompt = vllm_token_prompt(ids, ["a", "b", "c"], pad)
    assert prompt == {
        "prompt_token_ids": [pad, 1, 2, pad, 3, pad],
        "multi_modal_data": {"image": ["a", "b", "c"]},
    }
    assert vllm_token_prompt([1, 2], [], pad) == {"prompt_token_ids": [1, 2]}


def test_openai_engine_config_takes_the_key_from_the_variable_it_names(monkeypatch):
    """engine.api_key_env names the variable (OPENAI_API_KEY by default); an --api-key argument
    wins over it; an unset variable means no key."""
    from beacon.engines.config import EngineConfig
    from beacon.engines.registry import build_engine

    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    monkeypatch.setenv("MY_SERVER_KEY", "from-named-env")
    monkeypatch.delenv("UNSET_KEY", raising=False)
    settings = {"name": "openai", "model": "served", "base_url": "http://127.0.0.1:1/v1"}
    assert build_engine(EngineConfig(**settings)).api_key == "from-env"
    assert build_engine(EngineConfig(**settings, api_key_env="MY_SERVER_KEY")).api_key == (
        "from-named-env"
    )
    assert build_engine(EngineConfig(**settings, api_key_env="UNSET_KEY")).api_key is None
    assert build_engine(EngineConfig(**settings, api_key_env=None)).api_key is None
    assert build_engine(EngineConfig(**settings), api_key="given").api_key == "given"
