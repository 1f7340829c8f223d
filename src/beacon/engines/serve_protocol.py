"""The chat-completions protocol of `beacon serve`: a request validated whole into an engine
request, and an engine result into vLLM's response shape.

Validation is a pydantic model (`ChatCompletionRequest`): wrong types, non-object content
parts, NaN or infinite numbers (Python's JSON reads `Infinity`) and out-of-range values are a
400 naming the field, never a 500. Images are read and checked here, in the worker thread the
server runs `parse_chat_request` in: a data URL is decoded; a local path or `file://` URL is read
only through `serve_guard.read_local_media`; each image's size comes from its header before a
pixel is decoded, against the request's pixel budget. The chat is then rendered and tokenized,
so the prompt length is known before the request queues: prompt + `max_tokens` must fit the
model's context (vLLM's rule and wording), and the engine runs the ids as given (token-in).
"""

from __future__ import annotations

import io
import json
import time
import uuid
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import FastAPI
from fastapi.responses import Response
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from beacon.engines.base import (
    ChatTokenizer,
    Engine,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
)
from beacon.engines.serve_guard import BadRequest, ServeSettings, read_local_media
from beacon.engines.tokenizer import image_url_source
from beacon.images import ImageError, load_image

DEFAULT_MAX_TOKENS = 512
MAX_TOP_LOGPROBS = 20
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 256
"""Stop strings are matched on a decoded window of their length at every generated token, so
their number and length are bounded."""
GREEDY_BELOW = 1e-5
"""Temperatures under this sample greedily (vLLM's `_SAMPLING_EPS`): dividing float32 logits by
a smaller one overflows to inf and the softmax to NaN."""
SEED_RANGE = (-(2**63), 2**64 - 1)
"""What `torch.Generator.manual_seed` accepts."""


class _Part(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class TextPart(_Part):
    """A text part of a chat message, as OpenAI's API sends it."""

    type: Literal["text"]
    text: str


class ImageURL(_Part):
    """The `image_url` object of an image part: a data URL, or a local path or `file://` URL
    where `--allowed-local-media-path` permits reading it."""

    url: str


class ImageURLPart(_Part):
    """An image part in OpenAI's form; `image_url` may also be the bare URL string, as vLLM
    accepts."""

    type: Literal["image_url"]
    image_url: ImageURL | str


class ImagePart(_Part):
    """Beacon's own image part; over HTTP its `image` is a URL as in `image_url`."""

    type: Literal["image"]
    image: str


ContentPart = Annotated[TextPart | ImageURLPart | ImagePart, Field(discriminator="type")]


class ChatMessage(_Part):
    """One message of a request body: a role and text or parts; the role is length-capped since it
    goes into the prompt."""

    role: str = Field(min_length=1, max_length=64)
    content: str | list[ContentPart] | None = None


class ChatCompletionRequest(_Part):
    """The fields of a chat-completions body `beacon serve` reads; others are ignored, as vLLM
    ignores them."""

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=-1, description="vLLM uses -1 for off; so does 0")
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    n: int = 1
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    continue_final_message: bool = False
    add_generation_prompt: bool = True
    return_token_ids: bool = False
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    return_tokens_as_token_ids: bool = False

    @model_validator(mode="before")
    @classmethod
    def _null_is_default(cls, data: Any) -> Any:
        """`"logprobs": null` and the like mean the default, as OpenAI clients send them."""
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data


@dataclass
class ParsedChat:
    """One accepted request: what the engine runs and how to shape the answer."""

    request: GenerationRequest
    body: ChatCompletionRequest


def add_info_routes(app: FastAPI, model_name: str) -> None:
    """``GET /health`` (200, no body) and ``GET /v1/models`` (one card named `model_name`), as
    vLLM answers them: what `beacon serve` and the scripted servers say alike."""

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": model_name, "object": "model", "created": 0, "owned_by": "beacon"}
        return {"object": "list", "data": [card]}


def parse_chat_request(raw: bytes, settings: ServeSettings, engine: Engine) -> ParsedChat:
    """The engine request of one chat-completions body; BadRequest names what is wrong.

    Blocking (JSON, base64, image decoding, tokenizing): the server runs it in a thread.
    """
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise BadRequest("request body is not valid JSON") from None
    try:
        body = ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        raise BadRequest(_validation_message(exc)) from None
    _check_options(body)
    asked = body.max_completion_tokens or body.max_tokens
    if asked is not None and asked > settings.max_tokens_limit:
        raise BadRequest(
            f"max_tokens={asked} is over this server's limit of {settings.max_tokens_limit} "
            "(beacon serve --max-tokens-limit)"
        )
    images = _decode_images(body.messages, settings)
    messages = _engine_messages(body.messages, images)
    sampling = _sampling(body, asked or min(DEFAULT_MAX_TOKENS, settings.max_tokens_limit))
    request = GenerationRequest(
        messages, sampling, continue_final_message=body.continue_final_message
    )
    if engine.tokenizer is not None:
        request.prompt_ids = _prompt_ids(engine.tokenizer, request, images)
        request.images = images
        context = settings.max_model_len or getattr(engine, "max_model_len", None)
        sampling.max_new_tokens = _fit_context(
            len(request.prompt_ids), sampling.max_new_tokens, asked is None, context
        )
    return ParsedChat(request, body)


def _validation_message(exc: ValidationError) -> str:
    problems = [
        f"{'.'.join(str(p) for p in error['loc']) or 'body'}: {error['msg']}"
        for error in exc.errors()[:8]
    ]
    return "invalid request: " + "; ".join(problems)


def _check_options(body: ChatCompletionRequest) -> None:
    if body.n != 1:
        raise BadRequest(f"n={body.n} is not supported; this server returns one choice (n=1)")
    if body.continue_final_message and body.add_generation_prompt:
        raise BadRequest(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
        )
    if body.top_logprobs and not body.logprobs:
        raise BadRequest("top_logprobs needs logprobs: true (as in the OpenAI API)")
    stops = _stops(body)
    if len(stops) > MAX_STOP_STRINGS or any(not s or len(s) > MAX_STOP_CHARS for s in stops):
        raise BadRequest(
            f"'stop' must be at most {MAX_STOP_STRINGS} non-empty strings of at most "
            f"{MAX_STOP_CHARS} characters"
        )


def _stops(body: ChatCompletionRequest) -> list[str]:
    return [body.stop] if isinstance(body.stop, str) else list(body.stop or [])


def _sampling(body: ChatCompletionRequest, max_tokens: int) -> SamplingParams:
    return SamplingParams(
        temperature=body.temperature if body.temperature >= GREEDY_BELOW else 0.0,
        top_p=body.top_p,
        top_k=max(body.top_k, 0),
        max_new_tokens=max_tokens,
        stop=_stops(body),
        seed=body.seed,
        logprobs=True,
        top_logprobs=body.top_logprobs or 0,
    )


def _image_sources(messages: list[ChatMessage]) -> list[str]:
    sources = []
    for message in messages:
        for part in message.content if isinstance(message.content, list) else []:
            if isinstance(part, ImageURLPart):
                url = part.image_url
                sources.append(url.url if isinstance(url, ImageURL) else url)
            elif isinstance(part, ImagePart):
                sources.append(part.image)
    return sources


def _decode_images(messages: list[ChatMessage], settings: ServeSettings) -> list[Image.Image]:
    """The request's images in order, each one's size read from its header and charged to the
    request's pixel budget before it is decoded (a 160 KB PNG can hold 13000 x 13000 pixels)."""
    budget = settings.max_image_pixels
    images = []
    for index, url in enumerate(_image_sources(messages)):
        try:
            source = image_url_source(url)
        except ValueError as exc:
            raise BadRequest(f"cannot read an image in 'messages': {exc}") from None
        try:
            data = read_local_media(source, settings) if isinstance(source, str) else source
        except BadRequest as exc:
            raise BadRequest(f"cannot read an image in 'messages': image {index}: {exc}") from None
        try:
            with Image.open(io.BytesIO(data)) as header:
                width, height = header.size
        except Exception as exc:  # PIL raises many types for data that is not an image
            raise BadRequest(
                f"cannot read an image in 'messages': image {index} is not a readable image "
                f"({type(exc).__name__})"
            ) from None
        budget -= width * height
        if budget < 0:
            raise BadRequest(
                f"image {index} ({width}x{height}) brings the request's images over "
                f"{settings.max_image_pixels} pixels (beacon serve --max-image-pixels)"
            )
        try:
            images.append(load_image(data))
        except ImageError as exc:
            raise BadRequest(f"cannot read an image in 'messages': {exc}") from None
    return images


def _engine_messages(
    messages: list[ChatMessage], images: list[Image.Image]
) -> list[dict[str, Any]]:
    """Plain chat messages with the decoded images in their image parts."""
    remaining = iter(images)
    out = []
    for message in messages:
        content: Any = message.content
        if isinstance(content, list):
            content = [
                {"type": "text", "text": part.text}
                if isinstance(part, TextPart)
                else {"type": "image", "image": next(remaining)}
                for part in content
            ]
        out.append({"role": message.role, "content": content})
    return out


def _prompt_ids(
    tokenizer: ChatTokenizer, request: GenerationRequest, images: list[Image.Image]
) -> list[int]:
    """The rendered and tokenized chat (what `HFTokenizer.request_ids` does, on the images
    already decoded here instead of copies of them)."""
    from jinja2 import TemplateError

    try:
        text = tokenizer.render_chat(
            request.messages,
            add_generation_prompt=not request.continue_final_message,
            continue_final_message=request.continue_final_message,
        )
        return tokenizer.encode(text, images)
    except (ValueError, TypeError, KeyError, IndexError, TemplateError) as exc:
        raise BadRequest(f"cannot build the prompt: {exc}") from None


def _fit_context(prompt_tokens: int, max_tokens: int, defaulted: bool, context: int | None) -> int:
    """`max_tokens` checked against the model's context length; a default (the client gave
    none) shrinks to the room left, as vLLM's does."""
    if context is None:
        return max_tokens
    if prompt_tokens >= context:
        raise BadRequest(
            f"the prompt is {prompt_tokens} tokens; this model's maximum context length is "
            f"{context} tokens (beacon serve --max-model-len)"
        )
    if defaulted:
        return min(max_tokens, context - prompt_tokens)
    if prompt_tokens + max_tokens > context:
        raise BadRequest(
            f"This model's maximum context length is {context} tokens. However, you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} "
            "in the completion). Please reduce the length of the messages or completion."
        )
    return max_tokens


def chat_response(
    result: GenerationResult, body: ChatCompletionRequest, engine: Engine, model_name: str
) -> dict[str, Any]:
    """The OpenAI-shaped response body (with vLLM's extensions) for one engine result."""
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": _content(result, body, engine.tokenizer)},
        "logprobs": None,
        "finish_reason": result.finish_reason,
        "stop_reason": result.stop_reason,
    }
    if body.logprobs and result.logprobs is not None:
        choice["logprobs"] = {"content": _logprob_entries(result, body, engine)}
    if body.return_token_ids:
        choice["token_ids"] = result.token_ids
    prompt_tokens = len(result.prompt_ids or [])
    response: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.model or model_name,
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(result.token_ids),
            "total_tokens": prompt_tokens + len(result.token_ids),
        },
    }
    if body.return_token_ids:
        response["prompt_token_ids"] = result.prompt_ids
    return response


def _content(result: GenerationResult, body: ChatCompletionRequest, tokenizer: Any) -> str:
    if tokenizer is None or not result.token_ids:
        text = result.text
    elif body.skip_special_tokens:
        text = tokenizer.tokenizer.decode(result.token_ids, skip_special_tokens=True)
    else:
        text = tokenizer.decode(result.token_ids)
    stop = result.stop_reason
    if stop and not body.include_stop_str_in_output and stop in text:
        text = text[: text.index(stop)]
    return text


def _logprob_entries(
    result: GenerationResult, body: ChatCompletionRequest, engine: Engine
) -> list[dict[str, Any]]:
    """One entry per generated token, with its `top_logprobs` alternatives (most likely
    first; empty unless asked for)."""
    tops = result.top_logprobs if body.top_logprobs else None
    entries = []
    for i, (token_id, logprob) in enumerate(
        zip(result.token_ids, result.logprobs or [], strict=False)
    ):
        entry = _entry(token_id, logprob, body, engine)
        alternatives = tops[i] if tops is not None and i < len(tops) else []
        entry["top_logprobs"] = [
            _entry(alt.token_id, alt.logprob, body, engine) for alt in alternatives
        ]
        entries.append(entry)
    return entries


def _entry(
    token_id: int, logprob: float, body: ChatCompletionRequest, engine: Engine
) -> dict[str, Any]:
    if body.return_tokens_as_token_ids or engine.tokenizer is None:
        token = f"token_id:{token_id}"
    else:
        token = engine.tokenizer.decode([token_id])
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}
