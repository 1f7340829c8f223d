"""openai engine faults over a real local HTTP server: retries, timeouts, malformed replies."""

from __future__ import annotations

import asyncio
import gc
import socket

import pytest
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from beacon.engines.base import GenerationRequest, SamplingParams
from beacon.engines.openai import OpenAIEngine
from beacon.engines.scripted_server import chat_app
from beacon.engines.serve import run_app_in_thread


class Script:
    """Replies the fault server gives, in order; the last one repeats."""

    def __init__(self) -> None:
        self.replies: list[str] = ["ok"]
        self.attempts = 0
        self.bodies: list[dict] = []

    async def reply(self, body: dict) -> str | Response:
        self.bodies.append(body)
        reply = self.replies[min(self.attempts, len(self.replies) - 1)]
        self.attempts += 1
        if reply == "ok":
            return "fine"
        if reply == "slow":
            await asyncio.sleep(2.0)
            return "fine"
        if reply == "garbage":
            return PlainTextResponse("<html>not json</html>")
        if reply == "no-choices":
            return JSONResponse({"object": "chat.completion"})
        if reply == "list-400":
            return JSONResponse(["bad", "request"], 400)
        status = int(reply)
        headers = {"Retry-After": "0"} if status == 429 else {}
        return JSONResponse({"error": {"message": f"boom {status}"}}, status, headers=headers)


@pytest.fixture(scope="module")
def fault_server():
    script = Script()
    handle = run_app_in_thread(chat_app(script.reply, "m"))
    yield handle.base_url, script
    handle.stop()


@pytest.fixture()
def server(fault_server):
    base_url, script = fault_server
    script.attempts, script.bodies, script.replies = 0, [], ["ok"]
    return base_url, script


def _engine(base_url: str, **kw) -> OpenAIEngine:
    kw.setdefault("max_retries", 3)
    return OpenAIEngine(base_url, "m", backoff_s=0.01, max_backoff_s=0.05, **kw)


def _ask() -> GenerationRequest:
    return GenerationRequest([{"role": "user", "content": "q"}], SamplingParams(max_new_tokens=4))


def test_server_errors_then_recovery(server):
    base_url, script = server
    script.replies = ["500", "503", "ok"]
    [result] = _engine(base_url).generate([_ask()])
    assert result.error is None and result.text == "fine"
    assert script.attempts == 3


def test_rate_limit_is_retried(server):
    base_url, script = server
    script.replies = ["429", "ok"]
    [result] = _engine(base_url).generate([_ask()])
    assert result.text == "fine" and script.attempts == 2


def test_persistent_500_becomes_a_recorded_error(server):
    base_url, script = server
    script.replies = ["500"]
    [result] = _engine(base_url, max_retries=2).generate([_ask()])
    assert result.finish_reason == "error"
    assert "HTTP 500: boom 500" in result.error and "3 attempts" in result.error
    assert script.attempts == 3


def test_client_error_is_not_retried(server):
    base_url, script = server
    script.replies = ["400"]
    [result] = _engine(base_url).generate([_ask()])
    assert result.finish_reason == "error" and "HTTP 400: boom 400" in result.error
    assert script.attempts == 1


def test_timeout_is_retried_then_recorded(server):
    base_url, script = server
    script.replies = ["slow"]
    [result] = _engine(base_url, timeout_s=0.2, max_retries=1).generate([_ask()])
    assert result.finish_reason == "error" and "timed out" in result.error
    assert script.attempts == 2


def test_timeout_then_recovery(server):
    base_url, script = server
    script.replies = ["slow", "ok"]
    [result] = _engine(base_url, timeout_s=0.2).generate([_ask()])
    assert result.text == "fine" and script.attempts == 2


@pytest.mark.parametrize("reply", ["garbage", "no-choices"])
def test_malformed_reply_is_retried_then_recorded(server, reply):
    base_url, script = server
    script.replies = [reply]
    [result] = _engine(base_url, max_retries=1).generate([_ask()])
    assert result.finish_reason == "error" and "malformed reply" in result.error
    assert script.attempts == 2


def test_connection_refused_is_recorded():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    engine = _engine(f"http://127.0.0.1:{port}/v1", max_retries=1)
    [result] = engine.generate([_ask()])
    assert result.finish_reason == "error" and "connection error" in result.error


def test_one_failure_does_not_sink_the_batch(server):
    base_url, script = server
    script.replies = ["400", "ok"]
    first, second = _engine(base_url, concurrency=1).generate([_ask(), _ask()])
    assert first.finish_reason == "error" and second.text == "fine"


def test_request_body_uses_vllm_extensions(server):
    base_url, script = server
    script.replies = ["ok"]
    request = GenerationRequest(
        [{"role": "assistant", "content": "prefix"}],
        SamplingParams(temperature=0.5, top_k=5, max_new_tokens=7, stop=["</code>"], seed=3),
        continue_final_message=True,
    )
    _engine(base_url, extra_body={"priority": 1}).generate([request])
    body = script.bodies[0]
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert body["return_token_ids"] is True and body["logprobs"] is True
    assert (body["top_k"], body["max_tokens"], body["stop"], body["seed"]) == (5, 7, ["</code>"], 3)
    assert body["priority"] == 1


def test_hosted_mode_sends_only_openai_fields(server):
    base_url, script = server
    script.replies = ["ok"]
    _engine(base_url, vllm_extensions="off").generate([_ask()])
    assert "return_token_ids" not in script.bodies[0] and "top_k" not in script.bodies[0]


def test_an_engine_dropped_without_close_closes_its_session(server, caplog):
    base_url, _ = server
    engine = _engine(base_url)
    assert engine.generate([_ask()])[0].text == "fine"
    thread, session = engine._client._thread, engine._client.session
    del engine
    gc.collect()
    thread.join(timeout=10)
    assert not thread.is_alive() and session.closed
    assert "Unclosed" not in caplog.text


def test_an_error_body_that_is_not_an_object_is_still_reported(server):
    base_url, script = server
    script.replies = ["list-400"]
    [result] = _engine(base_url).generate([_ask()])
    assert result.finish_reason == "error" and "HTTP 400: ['bad', 'request']" in result.error


def test_the_environments_proxy_is_used_unless_no_proxy_exempts_the_host(server, monkeypatch):
    base_url, _ = server
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # a proxy that refuses every connection
    for name in ("http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{port}")
    [result] = _engine(base_url, max_retries=0).generate([_ask()])
    assert result.finish_reason == "error" and "connection error" in result.error
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    assert _engine(base_url).generate([_ask()])[0].text == "fine"
