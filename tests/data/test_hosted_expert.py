"""The data pipeline's expert on a hosted API: the scripted synth expert behind a server that
wants a Bearer key and refuses every request field the public OpenAI API does not define. The
expert, refine and hints stages get through with the key from `expert.engine.api_key_env`, and
no file of the pipeline's folder holds the key."""

from __future__ import annotations

import pytest

from beacon.data.eval_stages import run_expert
from beacon.data.hint_writing import run_hints
from beacon.data.scripted_expert import MODEL_NAME, ScriptedSynthExpert
from beacon.engines.scripted_server import chat_app
from beacon.engines.serve import run_app_in_thread

from .conftest import POOL, data_config, select_all

KEY = "sk-expert-4c2e81d07f9b3a65"


def test_the_expert_stages_run_on_a_hosted_api_and_keep_its_key_out(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPERT_KEY", KEY)
    expert = ScriptedSynthExpert(seed=0, count=POOL)
    seen: list[dict] = []

    def reply(body: dict):
        seen.append(body)
        return expert.reply(body["messages"])

    server = run_app_in_thread(chat_app(reply, MODEL_NAME, api_key=KEY, openai_fields_only=True))
    try:
        cfg = data_config(
            tmp_path, server.base_url, "expert.engine.api_key_env=EXPERT_KEY", "expert.refine=true"
        )
        select_all(cfg)
        assert run_expert(cfg, progress=False).kept == POOL
        assert run_hints(cfg, progress=False).kept == POOL
    finally:
        server.stop()
    assert seen, "the server answered: the key was sent"
    holding = [p for p in tmp_path.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert holding == []


def test_the_expert_refuses_a_key_in_its_settings(tmp_path):
    with pytest.raises(ValueError, match=r"expert\.engine: .*api_key is not a setting") as caught:
        data_config(tmp_path, "http://127.0.0.1:1/v1", f"expert.engine.api_key={KEY}")
    assert KEY not in str(caught.value)
