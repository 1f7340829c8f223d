"""`beacon serve`: a small OpenAI-compatible chat-completions server over a local engine.

It speaks the subset of vLLM's protocol that Beacon's `openai` engine, judges and critics use,
so they can be tested over real HTTP on CPU, and so a user without a GPU can serve a small model:

- `POST /v1/chat/completions`: messages with text and `image_url` parts (base64 data URLs),
  `temperature`, `top_p`, `top_k`, `max_tokens` / `max_completion_tokens`, `stop`, `seed`,
  `n=1`, `logprobs` + `top_logprobs`, and vLLM's extensions `continue_final_message`,
  `add_generation_prompt`, `return_token_ids` (adds `prompt_token_ids` to the response and
  `token_ids` to each choice), `skip_special_tokens`, `include_stop_str_in_output`.
- `GET /v1/models`, `GET /health`.
- `POST /beacon/update_weights` (RL weight sync, `beacon train grpo`): the body is a safetensors
  state dict (never a pickle); the engine copies it in by parameter name between batches.
  Engines without `load_weights` answer 501.

As in vLLM, a choice's `token_ids` and log-probs include the tokens of a matched stop string and
the end-of-sequence token, while the message text leaves the stop string out unless
`include_stop_str_in_output` is true; `stop_reason` names the matched string.

`top_logprobs=k` (with `logprobs: true`, as OpenAI requires) lists the k most likely tokens at
each position, most likely first, from the same raw distribution as the sampled token's
log-prob (vLLM's default `raw_logprobs`), so a served teacher gives top-K log-probs for
distillation. With `return_tokens_as_token_ids` every token reads "token_id:<id>".

Concurrent requests are gathered into batches of up to the engine's batch size by one worker
thread (`beacon.engines.batching.BatchingQueue`), so throughput scales with batching the way a
real server's does.

Not covered: streaming, `n > 1`, tools / `tool_choice`, response formats, authentication.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from beacon.engines.base import (
    Engine,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
)
from beacon.engines.batching import BatchingQueue
from beacon.engines.tokenizer import is_image_part, message_images

logger = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 512
_REQUEST_ERRORS = ("ValueError", "ImageError")
"""Engine errors caused by the request itself (answered 400, so clients do not retry them);
any other engine error is a 500."""
MAX_TOP_LOGPROBS = 20


class BadRequest(ValueError):
    """A request the server refuses with HTTP 400 and this message."""


def parse_chat_request(body: Any) -> tuple[GenerationRequest, dict[str, Any]]:
    """The engine request and the response options of one chat-completions body.

    Raises BadRequest with a message naming the field and the allowed values.
    """
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list of {role, content} objects")
    for m in messages:
        if not isinstance(m, dict) or "role" not in m:
            raise BadRequest("each message must be an object with 'role' and 'content'")
    n = body.get("n", 1)
    if n != 1:
        raise BadRequest(f"n={n} is not supported; this server returns one choice (n=1)")
    continue_final = bool(body.get("continue_final_message", False))
    add_prompt = body.get("add_generation_prompt", True)
    if continue_final and add_prompt:
        raise BadRequest(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
        )
    sampling = _sampling(body)
    top = body.get("top_logprobs") or 0
    if not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS:
        raise BadRequest(f"top_logprobs={top!r} must be an integer in [0, {MAX_TOP_LOGPROBS}]")
    if top and not body.get("logprobs"):
        raise BadRequest("top_logprobs needs logprobs: true (as in the OpenAI API)")
    sampling.top_logprobs = top
    try:
        images = message_images(messages)
    except (ValueError, KeyError, TypeError) as exc:
        raise BadRequest(f"cannot read an image in 'messages': {exc}") from exc
    request = GenerationRequest(
        messages=_with_images(messages, images),
        sampling=sampling,
        continue_final_message=continue_final,
    )
    options = {
        "model": body.get("model"),
        "logprobs": bool(body.get("logprobs", False)),
        "top_logprobs": top,
        "return_token_ids": bool(body.get("return_token_ids", False)),
        "skip_special_tokens": bool(body.get("skip_special_tokens", True)),
        "include_stop_str_in_output": bool(body.get("include_stop_str_in_output", False)),
        "return_tokens_as_token_ids": bool(body.get("return_tokens_as_token_ids", False)),
    }
    return request, options


def _sampling(body: dict[str, Any]) -> SamplingParams:
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_TOKENS
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise BadRequest("'stop' must be a non-empty string or a list of them")
    try:
        sampling = SamplingParams(
            temperature=float(body.get("temperature", 1.0)),
            top_p=float(body.get("top_p", 1.0)),
            top_k=max(int(body.get("top_k", 0) or 0), 0),  # vLLM uses -1 for "off"
            max_new_tokens=int(max_tokens),
            stop=stop,
            seed=None if body.get("seed") is None else int(body["seed"]),
            logprobs=True,
        )
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"a sampling field has the wrong type: {exc}") from exc
    if sampling.temperature < 0 or not 0 < sampling.top_p <= 1 or sampling.max_new_tokens < 1:
        raise BadRequest(
            f"need temperature >= 0 (got {sampling.temperature}), 0 < top_p <= 1 (got "
            f"{sampling.top_p}) and max_tokens >= 1 (got {sampling.max_new_tokens})"
        )
    return sampling


def _with_images(messages: list[dict[str, Any]], images: list[Any]) -> list[dict[str, Any]]:
    """Messages whose image parts carry the decoded PIL images (so engines do not decode again)."""
    remaining = iter(images)
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                if is_image_part(part):
                    parts.append({"type": "image", "image": next(remaining)})
                else:
                    parts.append(part)
            m = {**m, "content": parts}
        out.append(m)
    return out


def chat_response(
    result: GenerationResult, options: dict[str, Any], engine: Engine, model_name: str
) -> dict[str, Any]:
    """The OpenAI-shaped response body (with vLLM's extensions) for one engine result."""
    tokenizer = engine.tokenizer
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": _content(result, options, tokenizer)},
        "logprobs": None,
        "finish_reason": result.finish_reason,
        "stop_reason": result.stop_reason,
    }
    if options["logprobs"] and result.logprobs is not None:
        choice["logprobs"] = {"content": _logprob_entries(result, options, engine)}
    if options["return_token_ids"]:
        choice["token_ids"] = result.token_ids
    prompt_tokens = len(result.prompt_ids or [])
    body: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": options.get("model") or model_name,
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(result.token_ids),
            "total_tokens": prompt_tokens + len(result.token_ids),
        },
    }
    if options["return_token_ids"]:
        body["prompt_token_ids"] = result.prompt_ids
    return body


def _content(result: GenerationResult, options: dict[str, Any], tokenizer: Any) -> str:
    if tokenizer is None or not result.token_ids:
        text = result.text
    elif options["skip_special_tokens"]:
        text = tokenizer.tokenizer.decode(result.token_ids, skip_special_tokens=True)
    else:
        text = tokenizer.decode(result.token_ids)
    stop = result.stop_reason
    if stop and not options["include_stop_str_in_output"] and stop in text:
        text = text[: text.index(stop)]
    return text


def _logprob_entries(
    result: GenerationResult, options: dict[str, Any], engine: Engine
) -> list[dict[str, Any]]:
    """One entry per generated token, with its `top_logprobs` alternatives (most likely
    first; empty unless asked for)."""
    tops = result.top_logprobs if options["top_logprobs"] else None
    entries = []
    for i, (token_id, logprob) in enumerate(
        zip(result.token_ids, result.logprobs or [], strict=False)
    ):
        entry = _entry(token_id, logprob, options, engine)
        alternatives = tops[i] if tops is not None and i < len(tops) else []
        entry["top_logprobs"] = [
            _entry(alt.token_id, alt.logprob, options, engine) for alt in alternatives
        ]
        entries.append(entry)
    return entries


def _entry(
    token_id: int, logprob: float, options: dict[str, Any], engine: Engine
) -> dict[str, Any]:
    if options["return_tokens_as_token_ids"] or engine.tokenizer is None:
        token = f"token_id:{token_id}"
    else:
        token = engine.tokenizer.decode([token_id])
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}


def error_body(message: str, status: int) -> dict[str, Any]:
    kind = "BadRequestError" if status == 400 else "InternalServerError"
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def create_app(engine: Engine, model_name: str = "beacon", max_batch: int | None = None) -> Any:
    """The FastAPI app serving `engine` under the name `model_name`."""
    batcher = BatchingQueue(
        engine.generate, max_batch or getattr(engine, "batch_size", 8), wait_s=0.005, name="serve"
    )
    app = FastAPI(title="beacon serve")
    app.state.batcher = batcher

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": model_name, "object": "model", "created": 0, "owned_by": "beacon"}
        return {"object": "list", "data": [card]}

    @app.post("/v1/chat/completions")
    async def chat(raw: Request) -> JSONResponse:
        try:
            body = await raw.json()
        except ValueError:
            return JSONResponse(error_body("request body is not valid JSON", 400), 400)
        try:
            request, options = parse_chat_request(body)
        except BadRequest as exc:
            return JSONResponse(error_body(str(exc), 400), 400)
        result = await batcher.submit(request)
        if result.finish_reason == "error":
            status = 400 if (result.error or "").startswith(_REQUEST_ERRORS) else 500
            return JSONResponse(error_body(f"generation failed: {result.error}", status), status)
        return JSONResponse(chat_response(result, options, engine, model_name))

    @app.post("/beacon/update_weights")
    async def update_weights(raw: Request) -> JSONResponse:
        load = getattr(engine, "load_weights", None)
        if load is None:
            message = f"engine {getattr(engine, 'name', '?')!r} cannot take new weights"
            return JSONResponse(error_body(message, 501), 501)
        from safetensors.torch import load as load_safetensors

        try:
            tensors = load_safetensors(await raw.body())
            count = await asyncio.to_thread(load, tensors)
        except Exception as exc:  # a bad payload is the client's error, the server lives on
            return JSONResponse(error_body(f"weight update failed: {exc}", 400), 400)
        return JSONResponse({"updated": count})

    return app


@dataclass
class ServerHandle:
    """A running server: its base URL (ending in /v1) and how to stop it."""

    base_url: str
    stop: Any


def serve_in_thread(
    engine: Engine, model_name: str = "beacon", host: str = "127.0.0.1", port: int = 0
) -> ServerHandle:
    """Serve `engine` on `host:port` (0 = a free port) from a daemon thread.

    Returns once the server accepts connections; `handle.stop()` shuts it down.
    """
    app = create_app(engine, model_name)
    return run_app_in_thread(app, host, port, on_stop=app.state.batcher.close)


def run_app_in_thread(
    app: Any, host: str = "127.0.0.1", port: int = 0, on_stop: Any = None
) -> ServerHandle:
    """Run any ASGI `app` with uvicorn in a daemon thread (also used by fault tests)."""
    import uvicorn

    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that name it, and without it
    # every reply waits ~40 ms for the client's delayed ACK (measured in eval_throughput.py).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="beacon-serve", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"server did not start on {host}:{sock.getsockname()[1]}")
        time.sleep(0.01)

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=30)
        if on_stop is not None:
            on_stop()
        sock.close()

    return ServerHandle(base_url=f"http://{host}:{sock.getsockname()[1]}/v1", stop=stop)


@contextmanager
def serving(engine: Engine, model_name: str = "beacon") -> Iterator[str]:
    """`with serving(engine) as base_url:` runs the server for the block's duration."""
    handle = serve_in_thread(engine, model_name)
    try:
        yield handle.base_url
    finally:
        handle.stop()
