"""`beacon serve`: a small OpenAI-compatible chat-completions server over a local engine.

It speaks the subset of vLLM's protocol that Beacon's `openai` engine, judges and critics use,
so they can be tested over real HTTP on CPU, and so a user without a GPU can serve a small model:

- `POST /v1/chat/completions`: messages with text and `image_url` parts (base64 data URLs;
  local files only below `--allowed-local-media-path`), `temperature`, `top_p`, `top_k`,
  `max_tokens` / `max_completion_tokens`, `stop`, `seed`, `n=1`, `logprobs` + `top_logprobs`,
  and vLLM's extensions `continue_final_message`, `add_generation_prompt`, `return_token_ids`
  (adds `prompt_token_ids` to the response and `token_ids` to each choice),
  `skip_special_tokens`, `include_stop_str_in_output`. The protocol and its validation are
  `beacon.engines.serve_protocol`.
- `GET /v1/models`, `GET /health`.
- `POST /beacon/update_weights` (RL weight sync, `beacon train grpo`), only with
  `--allow-weight-updates`: the body is an `application/octet-stream` safetensors state dict
  (never a pickle), at most the size of the model's own, in the model's own dtypes; a push may
  come in several bodies (`?push=<id>&chunk=<i>&chunks=<n>`, in order), held until the last
  one arrived. The push is checked whole (names, shapes, dtypes, finite values, no name twice)
  before any tensor is copied, and applied with no response in flight, under the engine's
  generation lock (`beacon.engines.weights`). `GET /beacon/weights` lists the name, shape and
  dtype of every weight, so a trainer can cast and chunk its push. Engines that cannot check a
  push answer 501.

Who may do what (`--api-key`, the caps) is `beacon.engines.serve_guard`; docs/engines.md,
"Security", says what the server trusts.

As in vLLM, a choice's `token_ids` and log-probs include the tokens of a matched stop string and
the end-of-sequence token, while the message text leaves the stop string out unless
`include_stop_str_in_output` is true; `stop_reason` names the matched string.

`top_logprobs=k` (with `logprobs: true`, as OpenAI requires) lists the k most likely tokens at
each position, most likely first, from the same raw distribution as the sampled token's
log-prob (vLLM's default `raw_logprobs`), so a served teacher gives top-K log-probs for
distillation. With `return_tokens_as_token_ids` every token reads "token_id:<id>".

Concurrent requests are gathered into batches of up to the engine's batch size by one worker
thread (`beacon.engines.batching.BatchingQueue`); long generations run in chunks so that short
requests are not held for their whole length (`beacon.engines.sharing`).

Not covered: streaming, `n > 1`, tools / `tool_choice`, response formats.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from beacon.engines.base import Engine
from beacon.engines.batching import BatchingQueue
from beacon.engines.serve_guard import (
    BadRequest,
    BearerAuth,
    PayloadTooLarge,
    ServeSettings,
    error_response,
    read_body,
)
from beacon.engines.serve_protocol import add_info_routes, chat_response, parse_chat_request
from beacon.engines.sharing import WeightGate, generate_in_chunks
from beacon.engines.weights import (
    ChunkId,
    PushAssembler,
    push_size_limit,
    single_push,
    specs_json,
)

logger = logging.getLogger(__name__)

_REQUEST_ERRORS = ("ValueError", "ImageError")
"""Engine errors caused by the request itself (answered 400, so clients do not retry them);
any other engine error is a 500."""


def create_app(
    engine: Engine,
    model_name: str = "beacon",
    settings: ServeSettings | None = None,
    max_batch: int | None = None,
) -> Any:
    """The FastAPI app serving `engine` under the name `model_name`."""
    settings = settings or ServeSettings()
    batcher = BatchingQueue(
        engine.generate, max_batch or getattr(engine, "batch_size", 8), wait_s=0.005, name="serve"
    )
    gate = WeightGate()
    app = FastAPI(title="beacon serve", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.batcher = batcher
    if settings.api_key is not None:
        app.add_middleware(BearerAuth, api_key=settings.api_key)

    add_info_routes(app, model_name)

    @app.post("/v1/chat/completions")
    async def chat(raw: Request) -> JSONResponse:
        if _media_type(raw) != "application/json":
            return error_response("send the body as Content-Type: application/json", 415)
        try:
            body = await read_body(raw, settings.max_body_bytes, "beacon serve --max-body-bytes")
            parsed = await asyncio.to_thread(parse_chat_request, body, settings, engine)
        except PayloadTooLarge as exc:
            return error_response(str(exc), 413)
        except BadRequest as exc:
            return error_response(str(exc), 400)
        async with gate.generating():
            result = await generate_in_chunks(
                batcher.submit, parsed.request, settings.chunk_tokens, engine.tokenizer
            )
        if result.finish_reason == "error":
            status = 400 if (result.error or "").startswith(_REQUEST_ERRORS) else 500
            return error_response(f"generation failed: {result.error}", status)
        return JSONResponse(chat_response(result, parsed.body, engine, model_name))

    pushes = WeightPushes(engine, settings, gate)
    app.get("/beacon/weights")(pushes.weights)
    app.post("/beacon/update_weights")(pushes.update)

    return app


class WeightPushes:
    """The weight routes: `weights` lists what a push may replace, `update` takes a push or one
    chunk of it (pushes one at a time, under one lock) and applies a complete one."""

    def __init__(self, engine: Engine, settings: ServeSettings, gate: WeightGate) -> None:
        self.engine, self.settings, self.gate = engine, settings, gate
        self.lock = asyncio.Lock()
        self.assembler: PushAssembler | None = None

    def refusal(self) -> JSONResponse | None:
        """Why this server takes no pushes (403 or 501), or None."""
        if not self.settings.allow_weight_updates:
            message = (
                "weight updates are off on this server; start beacon serve with "
                "--allow-weight-updates (and --api-key) to take RL weight pushes"
            )
            return error_response(message, 403)
        if not all(hasattr(self.engine, a) for a in ("load_weights", "weight_specs")):
            name = getattr(self.engine, "name", "?")
            return error_response(f"engine {name!r} cannot take checked weight pushes", 501)
        return None

    async def weights(self) -> JSONResponse:
        """Name, shape and dtype of each weight, for the trainer to cast and chunk its push."""
        refused = self.refusal()
        if refused is not None:
            return refused
        return JSONResponse(specs_json(self.engine.weight_specs()))

    async def update(self, raw: Request) -> JSONResponse:
        """One body of a push: 200 `{"received": i + 1, "chunks": n}` while chunks are
        missing, `{"updated": count}` once the push is whole and applied."""
        refused = self.refusal()
        if refused is not None:
            return refused
        if _media_type(raw) != "application/octet-stream":
            message = "send the weights as Content-Type: application/octet-stream (safetensors)"
            return error_response(message, 415)
        async with self.lock:
            specs = self.engine.weight_specs()
            if self.assembler is None:  # the engine's weights keep their names, shapes, dtypes
                self.assembler = PushAssembler(specs)
            try:
                chunk = _chunk_id(raw)
                body = await read_body(
                    raw, push_size_limit(specs), "the size of the served model's state dict"
                )
                tensors = await asyncio.to_thread(_safetensors, body)
                complete = await asyncio.to_thread(self.assembler.add, chunk, tensors)
                if complete is None:
                    return JSONResponse({"received": chunk.index + 1, "chunks": chunk.total})
                async with self.gate.updating():
                    count = await asyncio.to_thread(
                        self.engine.load_weights, complete, exact_dtype=True
                    )
            except PayloadTooLarge as exc:
                self.assembler.discard()
                return error_response(str(exc), 413)
            except ValueError as exc:  # a bad payload is the client's error, the server lives on
                self.assembler.discard()
                return error_response(str(exc), 400)
        return JSONResponse({"updated": count})


def _chunk_id(request: Request) -> ChunkId:
    """Which chunk of which push the body is (`?push=&chunk=&chunks=`; none: a whole push)."""
    query = request.query_params
    if not any(key in query for key in ("push", "chunk", "chunks")):
        return single_push()
    try:
        chunk = ChunkId(query["push"], int(query["chunk"]), int(query["chunks"]))
    except (KeyError, ValueError):
        raise ValueError(
            "weight update refused: a chunked push needs ?push=<id>&chunk=<i>&chunks=<n> "
            "(integers, 0 <= i < n)"
        ) from None
    if not chunk.push or len(chunk.push) > 64:
        raise ValueError("weight update refused: push ids are 1 to 64 characters")
    return chunk


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def _safetensors(body: bytes) -> dict[str, Any]:
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        return load(body)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise ValueError(f"weight update refused: the body is not safetensors ({exc})") from None


@dataclass
class ServerHandle:
    """A running server: its base URL (ending in /v1) and how to stop it."""

    base_url: str
    stop: Any


def serve_in_thread(
    engine: Engine,
    model_name: str = "beacon",
    host: str = "127.0.0.1",
    port: int = 0,
    settings: ServeSettings | None = None,
) -> ServerHandle:
    """Serve `engine` on `host:port` (0 = a free port) from a daemon thread.

    Returns once the server accepts connections; `handle.stop()` shuts it down.
    """
    app = create_app(engine, model_name, settings)
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
def serving(
    engine: Engine, model_name: str = "beacon", settings: ServeSettings | None = None
) -> Iterator[str]:
    """`with serving(engine) as base_url:` runs the server for the block's duration."""
    handle = serve_in_thread(engine, model_name, settings=settings)
    try:
        yield handle.base_url
    finally:
        handle.stop()
