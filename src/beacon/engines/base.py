"""The one interface every generation engine implements, and the local tokenizer facade.

`Engine.generate(requests) -> results` takes a batch of chats (text + images) with sampling
parameters and stop strings and returns, per request, the text, the generated token ids and
their log-probs. Engines that run the model locally (`hf`, `vllm`) also accept the exact token
ids of the context (`GenerationRequest.prompt_ids`): the agent loop passes them so that a
trajectory's tokens are never re-tokenized between turns (token-in, token-out).

Engines may also offer `async agenerate(requests)`, the same contract for asyncio callers: the
agent loop runs every episode as its own task and awaits it (`hf` batches whatever requests are
pending; `openai` keeps one HTTP client for its life). Engines without it are wrapped in a
`beacon.engines.batching.BatchingQueue`.

An engine whose model runs behind a server sets `remote = True` (`openai`): the agent loop then
sends each request as soon as it is ready. For the others it gathers the turns of episodes that
will ask soon into one call first (`beacon.agent.gather`).

`ChatTokenizer` renders chats to text and text (with image placeholders) to token ids with the
model's own processor, so the agent loop can build prompt and observation segments locally.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from PIL import Image

Message = dict[str, Any]
"""A chat message: {"role": "user", "content": [{"type": "text", "text": ...},
{"type": "image", "image": <PIL.Image>}]}; `content` may also be a plain string."""


DEFAULT_CONCURRENCY = 16
"""openai engine: requests in flight where neither a setting nor the caller gives a number."""

VllmExtensions = Literal["auto", "on", "off"]
"""Whether the openai engine sends vLLM's extra request fields (token ids, top_k, continued
turns): ``on`` always, ``off`` never (hosted APIs), ``auto`` until the server refuses one with a
400 that names it, then never again for that engine (`beacon.engines.openai`)."""


@dataclass
class SamplingParams:
    """How to sample one generation call."""

    temperature: float = 0.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 disables top-k
    max_new_tokens: int = 512
    stop: list[str] = field(default_factory=list)  # generation ends after any of these strings
    seed: int | None = None  # the request's own random stream (the hf engine: one generator)
    logprobs: bool = True  # return the log-prob of each generated token
    top_logprobs: int = 0  # also return the k most likely tokens at each position


@dataclass(frozen=True)
class TopLogprob:
    """One alternative at a generated position: a token and its raw log-prob."""

    token_id: int
    logprob: float


@dataclass
class GenerationRequest:
    """One chat to continue.

    `messages` always describes the full context (HTTP engines send it). When `prompt_ids` is
    given, local engines use those exact ids (with `images` in placeholder order) instead of
    rendering `messages`. `continue_final_message` means the last message is an assistant
    prefix to continue rather than a finished turn. `response_format` is OpenAI's structured
    output setting (the critic's strict json_schema); only the `openai` engine sends it, the local
    engines do not constrain decoding.
    """

    messages: list[Message]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    prompt_ids: list[int] | None = None
    images: list[Image.Image] | None = None
    continue_final_message: bool = False
    response_format: dict[str, Any] | None = None


@dataclass
class GenerationResult:
    """What one request produced.

    `token_ids` are the generated ids, including the stop string's tokens when a stop string
    ended generation (so `text` equals their decoding); empty when the engine cannot give ids.
    `finish_reason` is "stop" (stop string or end-of-sequence), "length" (max_new_tokens) or
    "error" (then `error` says why and the other fields may be empty).
    """

    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    top_logprobs: list[list[TopLogprob]] | None = None  # per position, most likely first
    finish_reason: Literal["stop", "length", "error"] = "stop"
    stop_reason: str | None = None  # the stop string matched, or None for end-of-sequence
    prompt_ids: list[int] | None = None  # the context ids as the engine saw them, if known
    error: str | None = None

    @classmethod
    def failed(cls, exc: BaseException) -> GenerationResult:
        """The result of a request that raised `exc`: an error naming it, never an exception."""
        return cls(text="", finish_reason="error", error=f"{type(exc).__name__}: {exc}")


@runtime_checkable
class ChatTokenizer(Protocol):
    """Local rendering and tokenization with the model's own processor."""

    image_placeholder: str  # text for one image: "<|vision_start|><|image_pad|><|vision_end|>"
    eos_token_ids: list[int]

    def render_chat(
        self,
        messages: Sequence[Message],
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
    ) -> str:
        """The chat as the model's template writes it, one placeholder per image."""
        ...

    def encode(self, text: str, images: Sequence[Image.Image] = ()) -> list[int]:
        """Token ids of `text`; each image placeholder expands to that image's token count."""
        ...

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of `token_ids`, special tokens included."""
        ...


@runtime_checkable
class Engine(Protocol):
    """A text generator over chats with images."""

    name: str
    tokenizer: ChatTokenizer | None  # None: the engine gives text only (no token-in/out)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Results in request order. A failing request gives finish_reason="error", never raises."""
        ...

    def close(self) -> None:
        """Release the model, server connections or worker processes."""
        ...
