"""What `beacon serve` lets a client do: its settings, the bearer-token check, the body cap and
the only way a client's image path reaches the server's disk.

The server trusts no client (DESIGN.md, "Servers and trust"), with vLLM's flag names:
`--api-key` (every route but `/health` needs `Authorization: Bearer KEY`), `--allowed-local-
media-path` (no host file is read for a client otherwise) and `--allow-weight-updates`. Bodies,
prompts, `max_tokens` and image pixels are capped (`ServeSettings`).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import stat
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, field_validator
from starlette.requests import Request
from starlette.responses import JSONResponse

from beacon.config import StrictModel

API_KEY_ENV = "BEACON_API_KEY"
"""The environment variable `beacon serve --api-key` falls back to (vLLM's is VLLM_API_KEY)."""
OPEN_PATHS = frozenset({"/health"})
"""Routes answered without a key: load balancers and start-up probes poll them."""


class ServeSettings(StrictModel):
    """Who may use a `beacon serve` process and how much one request may cost."""

    model_config = ConfigDict(frozen=True)

    api_key: str | None = Field(
        None, min_length=1, description="Bearer token every route but /health needs; None: open"
    )
    allowed_local_media_path: Path | None = Field(
        None,
        description="Folder whose regular files clients may name as images (file:// URLs or "
        "paths); None: no host file is read for a client",
    )
    allow_weight_updates: bool = Field(
        False, description="Accept POST /beacon/update_weights (RL weight sync)"
    )
    max_body_bytes: int = Field(
        64 << 20,
        ge=1,
        description="Largest chat request body, and largest local image file, in bytes",
    )
    max_model_len: int | None = Field(
        None, ge=1, description="Prompt + max_tokens limit; None: the model's context length"
    )
    max_tokens_limit: int = Field(8192, ge=1, description="Most new tokens one request may ask for")
    max_image_pixels: int = Field(
        1 << 26,
        ge=1,
        description="Pixels the images of one request may have together, checked from each "
        "image's header before it is decoded (67 M: an 8K frame is 33 M)",
    )
    chunk_tokens: int = Field(
        256,
        ge=0,
        description="New tokens a request generates before waiting requests get the engine "
        "(beacon.engines.sharing; each later chunk prefills its context again: 1.12x the CPU "
        "of a 4000-token request at 256, 1.26x at 128); 0: each request runs whole",
    )

    @field_validator("allowed_local_media_path")
    @classmethod
    def _real_folder(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        real = Path(os.path.realpath(value))
        if not real.is_dir():
            raise ValueError(f"--allowed-local-media-path {value} is not a folder")
        return real


class BadRequest(ValueError):
    """A request the server refuses with HTTP 400 and this message."""


class PayloadTooLarge(ValueError):
    """A body over its cap (HTTP 413)."""


def error_body(message: str, status: int) -> dict[str, Any]:
    """An OpenAI-shaped error body."""
    kind = {
        400: "BadRequestError",
        401: "AuthenticationError",
        403: "PermissionDeniedError",
        413: "RequestTooLargeError",
        415: "UnsupportedMediaTypeError",
    }.get(status, "InternalServerError")
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def error_response(message: str, status: int) -> JSONResponse:
    """`error_body` as a response with that status."""
    return JSONResponse(error_body(message, status), status)


class BearerAuth:
    """ASGI middleware: every route outside `OPEN_PATHS` needs `Authorization: Bearer <key>`.

    The comparison is constant-time (`hmac.compare_digest`), so response timing does not tell
    how much of a guessed key was right. Shared by every Beacon server that takes `--api-key`.
    """

    def __init__(self, app: Any, api_key: str) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket") and scope["path"] not in OPEN_PATHS:
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                message = "missing or wrong API key: send the header 'Authorization: Bearer KEY'"
                response = error_response(message, 401)
                response.headers["WWW-Authenticate"] = "Bearer"
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def read_body(request: Request, limit: int, flag: str) -> bytes:
    """The request body, refused with `PayloadTooLarge` as soon as it passes `limit` bytes
    (by its Content-Length before reading, else while streaming): no body over the cap is ever
    held whole in memory. `flag` names the setting that raises the cap."""
    too_large = PayloadTooLarge(f"request body is over the limit of {limit} bytes ({flag})")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def read_local_media(path: str, settings: ServeSettings) -> bytes:
    """The bytes of a local image a client named, if `--allowed-local-media-path` allows it.

    Only a regular file below the allowed folder (after resolving `..` and symlinks) of at most
    `max_body_bytes` is read. The fd is opened non-blocking without following a last symlink,
    and its own type and size are checked, so a FIFO, device or file swapped in after the path
    check is still refused. Every refusal has one message whether or not the file exists, so
    a client learns nothing about the disk.
    """
    root = settings.allowed_local_media_path
    if root is None:
        raise BadRequest(
            "local image files are not read for clients; send images as base64 data URLs, or "
            "start beacon serve with --allowed-local-media-path DIR to allow files below DIR"
        )
    refused = BadRequest(
        f"local image files are read only if they are regular files of at most "
        f"{settings.max_body_bytes} bytes below --allowed-local-media-path"
    )
    try:
        real = Path(os.path.realpath(path))
    except (OSError, ValueError):  # e.g. a NUL in the path
        raise refused from None
    if not real.is_relative_to(root):
        raise refused
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (OSError, ValueError):  # missing or unreadable: told apart from nothing else
        raise refused from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > settings.max_body_bytes:
            raise refused
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(settings.max_body_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > settings.max_body_bytes:  # grew after the fstat
        raise refused
    return data


def exposure_warning(
    host: str, api_key: str | None, allow_weight_updates: bool = False
) -> str | None:
    """A warning for a server that listens beyond loopback without a key, else None."""
    if api_key is not None or _loopback(host):
        return None
    updates = " and replace the model's weights" if allow_weight_updates else ""
    return (
        f"WARNING: listening on {host} without an API key: any machine that reaches this port "
        f"can use the model{updates}. Set --api-key (or {API_KEY_ENV}), or listen on 127.0.0.1."
    )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False
