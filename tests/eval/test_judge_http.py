"""The LLM judge fallback inside a real eval run, against a real OpenAI-compatible HTTP server."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi import FastAPI

from beacon.agent.config import AgentConfig
from beacon.engines.scripted_server import chat_app
from beacon.engines.serve import run_app_in_thread
from beacon.eval.config import EvalConfig, JudgeConfig
from beacon.eval.runner import run_eval


def judge_server(seen: list[dict]) -> FastAPI:
    """A judge that calls every answer correct, speaking the chat-completions protocol."""

    def reply(body: dict) -> str:
        seen.append(body)
        return "CORRECT"

    return chat_app(reply, "judge-1")


def test_undecided_answers_go_to_the_judge_and_are_cached(tmp_path: Path, tiny_model_path) -> None:
    seen: list[dict] = []
    server = run_app_in_thread(judge_server(seen))
    try:
        cfg = EvalConfig(
            judge=JudgeConfig(model="judge-1", base_url=server.base_url),
            agent=AgentConfig(max_new_tokens_per_turn=8, max_total_new_tokens=8),
            benchmarks=["synth"],
            modes=["notool"],
            limit=3,
            out=str(tmp_path / "run"),
            bootstrap=0,
            report=False,
        )
        run_eval(cfg, progress=False)
        asked = len(seen)
        cfg.out = str(tmp_path / "again")
        (tmp_path / "again").mkdir()
        (tmp_path / "again" / "judge_cache").symlink_to(tmp_path / "run" / "judge_cache")
        run_eval(cfg, progress=False)
    finally:
        server.stop()
    records = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").open()]
    judged = [r for r in records if r["verdict_source"] == "judge"]
    # Random tokens never match a text answer, so the rules leave those to the judge; a number
    # the rules can read and compare is theirs to decide.
    assert judged and all(r["correct"] for r in judged)
    assert all(r["verdict_source"] == "rule" for r in records if r not in judged)
    assert asked == len(judged) and len(seen) == asked, "the second run must use the cache"
    assert all(b["model"] == "judge-1" and b["temperature"] == 0 for b in seen)
