"""Critic requests (one per group) and the thin async client over an injected sender.

`build_critic_request` assembles what Algorithm 1 line 5 sends: the system prompt for the group's
kind, then one user message with the question, the reference answer, the original image, every
rollout in order with its verifier label (reasoning, code, sandbox output, image ids), the
evidence states, and at most `max_tool_images` tool images. Tool images are chosen correct
rollouts first, then round-robin by call number (every rollout's first call before anyone's
second), then rollout order; an image whose pixels were already shown (same ImageStore key, as
when two rollouts ran the same crop) is shown once and named as the same picture, costing no
slot. Images not shown are listed as "not shown" and cannot be support (the closed-set rule).

`ask_critic` sends one request through `send` (an async callable that returns the reply text: the
openai engine with `response_format`, or a fake in tests), with a per-attempt timeout and retries
on transport errors and unparsable replies, and hands every raw exchange to `on_exchange` (the
trainer writes them to JSONL) besides logging it. It never raises: a critic that stays down gives
`CriticReply(output=None, ...)` and the group falls back to the base teacher.

Over HTTP: the critic's `send` is one OpenAI-compatible chat call per attempt, and the raw log.

`HttpCritic` is the `send` that `ask_critic` takes: it sends a
`CriticRequest` through the `openai` engine (the one chat-body builder, reply parser and HTTP
client), with the request's `response_format` (strict json_schema), temperature (0) and output cap
(`max_tokens`), images as base64 PNG data URLs, and returns the reply's message text. Any transport
error, error status or reply without a message raises `CriticHTTPError`; `ask_critic` turns that
into a retry and, when retries run out, into the base-teacher fallback. The engine makes one attempt
with no time limit of its own: per-attempt time limits and retries are `ask_critic`'s
(revue.critic_timeout_s, revue.critic_retries), so they are the same for every sender, and a reply
that does not parse is retried like a transport error.

`ExchangeLog` writes every raw exchange `ask_critic` reports (request with images replaced by
their ids, raw reply text or None, error, attempt) as one JSON line, with the step and group.

Critic: Critic requests in the background: one asyncio loop in a thread, so the trainer keeps
scoring.

`CriticRunner.submit` schedules `ask_critic` for one group on the runner's loop and returns a
`concurrent.futures.Future`; the trainer submits every group of a step, runs the base teacher
meanwhile, then collects the replies (Algorithm 1: the critic is a separate service). Every raw
exchange goes to the run's `critic.jsonl` with the step and group. `ask_critic` never raises, so
a future always holds a `CriticReply`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from beacon.engines.base import GenerationRequest, SamplingParams, VllmExtensions
from beacon.engines.openai import OpenAIEngine
from beacon.jsonl import JsonlWriter, repair_jsonl
from beacon.runfolder import CRITIC_LOG
from beacon.train.opd.config import RevueConfig
from beacon.train.opd.critic_prompts import PROMPT_VERSION, SYSTEM_PROMPTS
from beacon.train.opd.critic_schema import (
    RESPONSE_FORMAT,
    CriticOutput,
    ObservedState,
    ObservedStates,
    group_kind,
    parse_critic_output,
    rollout_id,
)
from beacon.types import ToolCall, Trajectory

logger = logging.getLogger(__name__)


@dataclass
class CriticRequest:
    """One group's critic request, ready for an OpenAI-compatible chat call.

    `messages` follow `beacon.engines.base.Message` (PIL images in image parts); `shown_image_ids`
    are the critic image ids whose pixels were shown; `kind` selects the prompt variant.
    """

    kind: str
    messages: list[dict[str, Any]]
    shown_image_ids: frozenset[str]
    rollout_ids: list[str]
    response_format: dict[str, Any] = field(default_factory=lambda: RESPONSE_FORMAT)
    temperature: float = 0.0
    max_tokens: int = 2048
    prompt_version: str = PROMPT_VERSION

    def describe(self) -> dict[str, Any]:
        """The request as JSON-able data, images replaced by their ids (for logs)."""
        messages = []
        for message in self.messages:
            content = message["content"]
            if isinstance(content, list):
                content = [p.get("text", f"<image {p.get('image_id')}>") for p in content]
            messages.append({"role": message["role"], "content": content})
        return {
            "kind": self.kind,
            "prompt_version": self.prompt_version,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "shown_image_ids": sorted(self.shown_image_ids),
            "messages": messages,
        }


def select_tool_images(
    states: ObservedStates, labels: Sequence[bool], max_images: int
) -> tuple[list[str], dict[str, str]]:
    """Tool image ids to show (in showing order) and aliases: duplicate id -> the shown id."""
    candidates = []
    for state in states.states[1:]:
        call = int(state.state_id.rsplit("_S", 1)[1])
        for j, image_id in enumerate(state.new_image_ids):
            candidates.append((not labels[state.owner], call, state.owner, j, image_id))
    shown: list[str] = []
    by_key: dict[str, str] = {key: i for i, key in _original_keys(states)}
    aliases: dict[str, str] = {}
    for *_, image_id in sorted(candidates):
        key = states.image_keys[image_id]
        if key in by_key:
            aliases[image_id] = by_key[key]
        elif len(shown) < max_images:
            shown.append(image_id)
            by_key[key] = image_id
    return shown, aliases


def _original_keys(states: ObservedStates) -> list[tuple[str, str]]:
    return [(i, states.image_keys[i]) for i in states.original.image_ids]


def _rollout_text(index: int, trajectory: Trajectory, correct: bool, states: ObservedStates) -> str:
    by_segment = {s.segment_index: s for s in states.owned_by(index)}
    label = "CORRECT" if correct else "INCORRECT"
    lines = [f"=== Rollout {rollout_id(index)} ({label}) ==="]
    calls = iter(trajectory.tool_calls)
    for s_index, segment in enumerate(trajectory.segments):
        if segment.role == "generated":
            lines.append(segment.text)
        elif segment.role == "observation":
            call = next(calls, None)
            state = by_segment.get(s_index)
            lines.append(_call_text(call, state))
    lines.append(f"Final answer: {trajectory.final_answer or '(none)'}")
    return "\n".join(lines)


def _call_text(call: ToolCall | None, state: ObservedState | None) -> str:
    head = f"[sandbox call -> state {state.state_id}]" if state else "[sandbox call, not executed]"
    parts = [head]
    if call is not None and call.stdout.strip():
        parts.append("stdout: " + call.stdout.strip()[:2000])
    if call is not None and call.error:
        parts.append("error: " + call.error[:500])
    if state is not None and state.new_image_ids:
        parts.append("images returned: " + ", ".join(state.new_image_ids))
    return "\n".join(parts)


def _states_text(states: ObservedStates, shown: set[str], aliases: dict[str, str]) -> str:
    def name(image_id: str) -> str:
        if image_id in shown:
            return image_id
        if image_id in aliases:
            return f"{image_id} (same picture as {aliases[image_id]})"
        return f"{image_id} (not shown)"

    lines = ["EVIDENCE STATES"]
    for s in states.states:
        owner = "none" if s.owner is None else rollout_id(s.owner)
        images = ", ".join(name(i) for i in s.image_ids)
        lines.append(
            f"{s.state_id}: owner {owner}, n_tool={s.n_tool}, n_code={s.n_code}; "
            f"available images: {images}"
        )
    return "\n".join(lines)


def build_critic_request(
    question: str,
    reference: str,
    trajectories: Sequence[Trajectory],
    labels: Sequence[bool],
    states: ObservedStates,
    load_image: Callable[[str], Image.Image],
    max_tool_images: int = 8,
    max_tokens: int = 2048,
) -> CriticRequest:
    """The critic request of one group; `load_image` maps an ImageStore key to its image."""
    kind = group_kind(labels)
    tool_ids, aliases = select_tool_images(states, labels, max_tool_images)
    originals = list(states.original.image_ids)
    shown = set(originals) | set(tool_ids)
    content: list[dict[str, Any]] = [
        {"type": "text", "text": f"TASK\nQuestion: {question}\nReference answer: {reference}"}
    ]
    for image_id in [*originals, *tool_ids]:
        content.append({"type": "text", "text": f"\nImage {image_id}:"})
        content.append(
            {
                "type": "image",
                "image": load_image(states.image_keys[image_id]),
                "image_id": image_id,
            }
        )
    rollouts = [_rollout_text(i, t, labels[i], states) for i, t in enumerate(trajectories)]
    ids = [rollout_id(i) for i in range(len(trajectories))]
    content.append(
        {
            "type": "text",
            "text": "\n\nROLLOUTS\n"
            + "\n\n".join(rollouts)
            + "\n\n"
            + _states_text(states, shown, aliases)
            + f"\n\nReturn exactly one diagnosis for each rollout: {', '.join(ids)}.",
        }
    )
    messages = [
        {"role": "system", "content": SYSTEM_PROMPTS[kind]},
        {"role": "user", "content": content},
    ]
    shown_all = frozenset(shown | {a for a, target in aliases.items() if target in shown})
    return CriticRequest(kind, messages, shown_all, ids, max_tokens=max_tokens)


@dataclass
class CriticReply:
    """What asking the critic gave: the parsed output or None, and every raw reply."""

    output: CriticOutput | None
    error: str | None
    attempts: int
    raw_replies: list[str] = field(default_factory=list)


Sender = Callable[[CriticRequest], Awaitable[str]]


async def ask_critic(
    request: CriticRequest,
    send: Sender,
    retries: int = 2,
    timeout_s: float = 120.0,
    on_exchange: Callable[[dict[str, Any]], None] | None = None,
) -> CriticReply:
    """Send `request` until a reply parses, at most 1 + `retries` times; never raises."""
    reply = CriticReply(output=None, error=None, attempts=0)
    for attempt in range(1 + retries):
        reply.attempts = attempt + 1
        try:
            text = await asyncio.wait_for(send(request), timeout_s)
        except asyncio.TimeoutError:
            text, reply.error = None, f"critic timed out after {timeout_s} s"
        except Exception as exc:  # any transport failure is a fallback, not a dead run
            text, reply.error = None, f"critic request failed: {type(exc).__name__}: {exc}"
        if text is not None:
            reply.raw_replies.append(text)
            try:
                reply.output, reply.error = parse_critic_output(text), None
            except ValueError as exc:
                reply.error = f"critic reply rejected: {exc}"
        _log_exchange(request, text, reply, on_exchange)
        if reply.output is not None:
            return reply
    logger.warning(
        "critic gave no usable output after %d attempts: %s", reply.attempts, reply.error
    )
    return reply


def _log_exchange(
    request: CriticRequest,
    text: str | None,
    reply: CriticReply,
    on_exchange: Callable[[dict[str, Any]], None] | None,
) -> None:
    record = {
        "attempt": reply.attempts,
        "request": request.describe(),
        "response": text,
        "error": reply.error,
    }
    logger.debug("critic exchange: %s", json.dumps(record, ensure_ascii=False)[:4000])
    if on_exchange is not None:
        on_exchange(record)


class CriticHTTPError(RuntimeError):
    """The critic endpoint could not be reached, answered with an error status, or sent a reply
    without message text."""


def critic_generation_request(request: CriticRequest) -> GenerationRequest:
    """The engine request of one critic request: its messages, temperature, output cap and
    response format; no log-probs (the critic's text is all that is read)."""
    sampling = SamplingParams(
        temperature=request.temperature, max_new_tokens=request.max_tokens, logprobs=False
    )
    return GenerationRequest(request.messages, sampling, response_format=request.response_format)


class HttpCritic:
    """`send` for `ask_critic`: posts to an OpenAI-compatible endpoint (critic.base_url)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        vllm_extensions: VllmExtensions = "off",
    ) -> None:
        self.engine = OpenAIEngine(
            base_url,
            model,
            api_key,
            timeout_s=None,
            max_retries=0,
            vllm_extensions=vllm_extensions,
        )

    def request_body(self, request: CriticRequest) -> dict[str, Any]:
        """The chat-completions body `__call__` sends for `request`."""
        return self.engine.request_body(critic_generation_request(request))

    async def __call__(self, request: CriticRequest) -> str:
        [result] = await self.engine.agenerate([critic_generation_request(request)])
        if result.error is not None:
            raise CriticHTTPError(f"critic {result.error}")
        return result.text

    async def aclose(self) -> None:
        """Close the HTTP client (a later call opens a new one)."""
        self.engine.close()


class ExchangeLog:
    """Append-only JSONL of every raw critic exchange, one durable line per attempt.

    Written through `beacon.jsonl.JsonlWriter` (thread-safe, fsynced), after cutting a line torn
    by a killed run, so a resumed run appends to whole lines. Exchanges of steps redone after a
    resume are logged again, each with its step: the log records attempts, not results.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        repair_jsonl(path)
        self._lines = JsonlWriter(path)

    def writer(self, **context: Any) -> Any:
        """An `on_exchange` callback that adds `context` (step, group) to every record."""

        def write(record: dict[str, Any]) -> None:
            self._lines.write(json.dumps({**context, **record}, ensure_ascii=False, default=str))

        return write

    def close(self) -> None:
        """Close the file; every line written is already durable."""
        self._lines.close()


class CriticRunner:
    """Runs critic requests on a private event loop thread."""

    def __init__(self, send: Sender, cfg: RevueConfig, run_dir: Path) -> None:
        self.send = send
        self.cfg = cfg
        self.log = ExchangeLog(run_dir / CRITIC_LOG)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="beacon-critic", daemon=True
        )
        self._thread.start()

    def submit(self, request: CriticRequest, step: int, group: int) -> Future[CriticReply]:
        coroutine = ask_critic(
            request,
            self.send,
            retries=self.cfg.critic_retries,
            timeout_s=self.cfg.critic_timeout_s,
            on_exchange=self.log.writer(step=step, group=group),
        )
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def close(self) -> None:
        aclose = getattr(self.send, "aclose", None)
        if aclose is not None:
            asyncio.run_coroutine_threadsafe(aclose(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.log.close()
