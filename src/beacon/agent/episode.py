"""One episode's state: the context so far (token ids, images and chat messages side by side),
the trajectory being recorded, and the rules that turn an engine result into the next step.

The context is kept twice on purpose. `ids` + `images` are the exact tokens the policy has seen
(token-in, token-out: generated ids are appended as the engine returned them, observations are
tokenized on their own and appended), and local engines consume them as they are. `messages` is
the same context as a chat, for HTTP engines that only take messages. Engines without a local
tokenizer produce text-only segments.

`EpisodeState` is a pure state machine: it never calls an engine or a sandbox, so the same rules
run under the async loop, in tests with scripted results, and anywhere else.

Recording is separate from advancing. The context a request needs (messages, images) is
updated at once; the trajectory's record of the prompt and of each observation (the images'
store keys and files, the segment's token ids) is work an engine that takes only messages
does not wait for. With `defer_records` those records wait in `take_records()` until the agent
loop runs them while the request is out, and `absorb` refuses to go on before they ran, so the
trajectory keeps its order: ~4 ms less per episode before the server sees each turn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from PIL import Image

from beacon.agent.config import AgentConfig
from beacon.agent.formats import Format
from beacon.agent.transcript import TEXT_IMAGE_PLACEHOLDER, messages_text
from beacon.engines.base import (
    ChatTokenizer,
    GenerationRequest,
    GenerationResult,
    Message,
    SamplingParams,
)
from beacon.images import ImageStore, image_key
from beacon.types import (
    EngineView,
    EvidenceState,
    FinishReason,
    Sample,
    Segment,
    ToolCall,
    Trajectory,
)

Mode = Literal["tool", "notool", "hinted", "gated"]  # gated: p_tool picks tool or notool
_SEED_STRIDE = 1_000_003  # request n of an episode seeded `seed * stride + n` (mod 2**31)


@dataclass
class EpisodeSpec:
    """What to run: a sample, a mode, the sample index k, and (hinted mode) the hint.

    `seed` makes sampling reproducible: request n of the episode is seeded from (seed, n) alone,
    so a resumed or re-run episode samples the same tokens at any concurrency.
    """

    sample: Sample
    mode: Mode = "tool"
    k: int = 0
    question: str | None = None  # the text shown to the model; defaults to sample.question
    hint: str | None = None
    seed: int | None = None

    @property
    def tools(self) -> bool:
        return self.mode != "notool"


class EpisodeState:
    """Advances one episode: `request()` -> engine -> `absorb()` -> sandbox -> `observe()`.

    After `absorb`, either `done` is set (with the trajectory's finish reason), or
    `pending_call` holds the text of a call to execute, or the next `request()` continues.
    With `defer_records`, run `take_records()` (if not None) before each `absorb` and once at
    the end (module docstring); its requests then carry no `prompt_ids`.
    """

    def __init__(
        self,
        spec: EpisodeSpec,
        fmt: Format,
        config: AgentConfig,
        tokenizer: ChatTokenizer | None,
        store: ImageStore | None,
        defer_records: bool = False,
    ) -> None:
        self.spec, self.fmt, self.config = spec, fmt, config
        self.tokenizer, self.store = tokenizer, store
        self.defer_records = defer_records
        self._records: list[Callable[[], None]] = []
        self.trajectory = Trajectory(
            sample_id=spec.sample.id, mode=spec.mode, format=fmt.name, hint=spec.hint
        )
        self.messages: list[Message] = []
        self.ids: list[int] = []
        self.images: list[Image.Image] = []
        self.done = False
        self.pending_call: str | None = None
        self.in_code = False  # inside an open call: the next request continues the code
        self.turns = 0
        self.requests = 0
        self.new_tokens = 0
        self.turn_tokens = 0  # this turn's tokens, over the requests that continue its call
        self.generated = ""  # the model's own text so far (observations left out)

    # ----------------------------------------------------------------- start
    def start(self, messages: list[Message], images: list[Image.Image]) -> None:
        """Open the context with the opening messages, and record the prompt segment."""
        self.messages, self.images = messages, list(images)
        self._record(lambda: self._record_prompt(messages, list(images)))

    def _record_prompt(self, messages: list[Message], images: list[Image.Image]) -> None:
        prompt = self._prompt_segment(messages, images)
        self.ids = list(prompt.token_ids)
        self.trajectory.segments.append(prompt)

    def record_original_prompt(self, messages: list[Message], images: list[Image.Image]) -> None:
        """HGCE: keep the un-hinted prompt so training can swap it in for the hinted one."""

        def record() -> None:
            self.trajectory.original_prompt = self._prompt_segment(messages, images)

        self._record(record)

    def take_records(self) -> Callable[[], None] | None:
        """The records deferred so far as one function to run (in any thread, while nothing
        else touches this state), or None when there are none."""
        records, self._records = self._records, []
        if not records:
            return None

        def run() -> None:
            for record in records:
                record()

        return run

    def _record(self, record: Callable[[], None]) -> None:
        if self.defer_records:
            self._records.append(record)
        else:
            record()

    def _prompt_segment(self, messages: list[Message], images: list[Image.Image]) -> Segment:
        keys = [self._image_key(im) for im in images]
        if self.tokenizer is None:
            return Segment(role="prompt", text=messages_text(messages), images=keys)
        text = self.tokenizer.render_chat(messages, add_generation_prompt=True)
        return Segment(
            role="prompt", text=text, token_ids=self.tokenizer.encode(text, images), images=keys
        )

    # -------------------------------------------------------------- generate
    def request(self) -> GenerationRequest:
        """The next engine request, with this turn's stop strings and token budget.

        Outside a call the model stops at the answer's close tag and (tool modes) at the call's
        close tag, or at its open tag when code has its own temperature. Inside a call only the
        call's close tag stops it: an answer tag in code is code.
        """
        cfg, fmt = self.config, self.fmt
        remaining = cfg.max_total_new_tokens - self.new_tokens
        if cfg.max_context_tokens is not None:  # remote engines: ids lag one observation
            remaining = min(remaining, cfg.max_context_tokens - len(self.ids))
        temperature = cfg.temperature
        if self.in_code and self.spec.tools:
            stop = [fmt.call_close]
            if cfg.code_temperature is not None:
                temperature = cfg.code_temperature
        elif self.in_code:
            stop = [fmt.answer_close]  # notool: read on until an answer outside the code
        else:
            stop = [fmt.answer_close]
            if self.spec.tools:
                split_code = cfg.code_temperature is not None
                stop.append(fmt.call_open if split_code else fmt.call_close)
        sampling = SamplingParams(
            temperature=float(temperature),
            top_p=cfg.top_p,
            top_k=cfg.top_k,
            max_new_tokens=max(1, min(cfg.max_new_tokens_per_turn - self.turn_tokens, remaining)),
            stop=stop,
            seed=self._request_seed(),
            logprobs=True,  # the sampler's own log-probs: trainers check them against theirs
        )
        self.requests += 1
        continuing = self.messages[-1]["role"] == "assistant"
        with_ids = self.tokenizer is not None and not self.defer_records
        return GenerationRequest(
            messages=self.messages,
            sampling=sampling,
            prompt_ids=list(self.ids) if with_ids else None,
            images=list(self.images),
            continue_final_message=continuing,
        )

    def _request_seed(self) -> int | None:
        """Seed of request n, from (spec.seed, n) only: no batch or order enters it."""
        if self.spec.seed is None:
            return None
        return (self.spec.seed * _SEED_STRIDE + self.requests) % 2**31

    def absorb(self, result: GenerationResult) -> None:
        """Append what the engine generated and decide what happens next."""
        if self._records:
            raise RuntimeError("run take_records() before absorb(): the trajectory is behind")
        if result.finish_reason == "error":
            self._finish("engine_error", error=result.error or "engine error")
            return
        if not result.text and not result.token_ids:
            self._finish("stop")  # nothing generated: going on would ask the same again
            return
        if not self.in_code:
            self.turns += 1
            self.turn_tokens = 0
        count = len(result.token_ids) if result.token_ids else len(result.text) // 4
        self.new_tokens += count
        self.turn_tokens += count
        self._append_generated(result)
        self.generated += result.text
        self._route(result)
        self._check_context()

    def _route(self, result: GenerationResult) -> None:
        """After a generation: continue a call, answer, queue a tool call, or stop."""
        if self.done:
            return
        fmt, cfg = self.fmt, self.config
        self.in_code = fmt.in_open_call(self.generated)
        if self.in_code:
            # A call continued over several requests (a stop string inside the code) shares
            # its turn's budget: else a model repeating that string buys one request per token.
            spent = self.turn_tokens >= cfg.max_new_tokens_per_turn
            if (
                result.finish_reason == "length"
                or spent
                or self.new_tokens >= cfg.max_total_new_tokens
            ):
                self._finish("max_tokens")
            elif result.stop_reason is None:
                self._finish("stop")  # end of sequence inside a call
            # else a stop string inside the call (an answer tag, or the open tag when code has
            # its own temperature): the code goes on in the next request
        elif fmt.answered(self.generated):
            self._finish("answer")
        elif self.spec.tools and result.stop_reason == fmt.call_close:
            if self.trajectory.num_tool_calls >= cfg.max_tool_calls:
                self._finish("max_tool_calls")
            elif self.turns >= cfg.max_turns:
                self._finish("max_turns")  # no turn would be left to read the result
            elif self.new_tokens >= cfg.max_total_new_tokens:
                self._finish("max_tokens")
            else:
                self.pending_call = fmt.last_call(self.generated)
        elif result.finish_reason == "length":
            self._finish("max_tokens")
        else:
            self._finish("stop")

    def _check_context(self) -> None:
        """End the episode once its tokens, all roles counted, reach `max_context_tokens` (a
        turn that its token cap cut at that budget ended on the context, not on max_tokens)."""
        budget = self.config.max_context_tokens
        if budget is None or len(self.ids) < budget:
            return
        if not self.done:
            self._finish("context_length")
        elif self.trajectory.finish_reason == "max_tokens":
            self.trajectory.finish_reason = "context_length"

    def _append_generated(self, result: GenerationResult) -> None:
        # Without a tokenizer the episode is text-only (module docstring): ids a server sent
        # cannot be split or re-encoded consistently, so they are not kept.
        ids = list(result.token_ids) if self.tokenizer is not None else []
        kind = "code" if self.in_code and self.spec.tools else "text"
        if self.tokenizer is not None and not ids and result.text:
            # A tokenizer-backed episode must never guess ids: an engine that returned text only
            # would break token-in/token-out, so we stop here with a clear reason.
            self._finish("engine_error", error="engine returned text without token ids")
            return
        pieces = (
            self._split_code(result.text, ids) if kind == "text" else [(kind, result.text, ids)]
        )
        logprobs = list(result.logprobs) if result.logprobs is not None and ids else None
        start = 0
        for piece_kind, text, piece_ids in pieces:
            piece_lp = None if logprobs is None else logprobs[start : start + len(piece_ids)]
            start += len(piece_ids)
            self.trajectory.segments.append(
                Segment(
                    role="generated",
                    text=text,
                    token_ids=piece_ids,
                    logprobs=piece_lp,
                    kind=piece_kind,
                )
            )
        if result.prompt_ids is not None and ids:  # what the engine saw, for the trainers
            view = EngineView.of([*result.prompt_ids, *ids], len(self.images))
            self.trajectory.segments[-1].engine = view
        self.ids.extend(ids)
        self._append_assistant_text(result.text)

    def _split_code(self, text: str, ids: list[int]) -> list[tuple[str, str, list[int]]]:
        """Split one generated chunk after `call_open` into a text and a code segment.

        The opening tag stays with the text: it is the decision to call a tool, sampled like
        text (as in the two-request mode of `code_temperature`). With token ids, the cut falls
        after the first token whose decoded prefix contains the whole tag (binary search).
        """
        at = text.find(self.fmt.call_open) if self.spec.tools else -1
        if at < 0:
            return [("text", text, ids)]
        if not ids:
            cut_at = at + len(self.fmt.call_open)
            pieces = [("text", text[:cut_at], [])]
            return [*pieces, ("code", text[cut_at:], [])] if text[cut_at:] else pieces
        lo, hi = 1, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.fmt.call_open in self.tokenizer.decode(ids[:mid]):
                hi = mid
            else:
                lo = mid + 1
        head = self.tokenizer.decode(ids[:lo])
        pieces = [("text", head, ids[:lo])]
        return [*pieces, ("code", text[len(head) :], ids[lo:])] if lo < len(ids) else pieces

    def _append_assistant_text(self, text: str) -> None:
        last = self.messages[-1] if self.messages else None
        if last is not None and last["role"] == "assistant":
            last["content"].append({"type": "text", "text": text})
        else:
            self.messages = [
                *self.messages,
                {"role": "assistant", "content": [{"type": "text", "text": text}]},
            ]

    # --------------------------------------------------------------- observe
    def observe(self, call: ToolCall, images: list[Image.Image]) -> None:
        """Append a tool call's result to the context (the model reads it next) and record it
        as an observation segment."""
        self.pending_call = None
        self.trajectory.tool_calls.append(call)
        budget = self.config.max_images
        if budget is not None and len(self.images) + len(images) > budget:
            self._finish("max_images")  # the model would read it with too many images
            return
        self.images.extend(images)
        self._append_observation_message(call, images)
        available = len(self.images)
        self._record(lambda: self._record_observation(call, list(images), available))
        self._check_context()  # deferred records: checked at the next absorb instead

    def _record_observation(
        self, call: ToolCall, images: list[Image.Image], images_available: int
    ) -> None:
        call.images = [self._image_key(im) for im in images]
        if self.tokenizer is None:
            placeholder = TEXT_IMAGE_PLACEHOLDER
        else:
            placeholder = self.tokenizer.image_placeholder
        text = self.fmt.observation_text(call, placeholder * len(images))
        ids = self.tokenizer.encode(text, images) if self.tokenizer is not None else []
        self.trajectory.segments.append(
            Segment(role="observation", text=text, token_ids=ids, images=list(call.images))
        )
        self.ids.extend(ids)
        if call.executed:
            self.trajectory.evidence.append(
                EvidenceState(
                    segment_index=len(self.trajectory.segments) - 1,
                    token_position=len(self.ids),
                    images_available=images_available,
                    tool_calls=self.trajectory.num_tool_calls,
                    code_tokens=self.trajectory.code_tokens,
                )
            )

    def _append_observation_message(self, call: ToolCall, images: list[Image.Image]) -> None:
        parts = self.fmt.observation_parts(call, images)
        if self.fmt.observation_in_assistant_turn:
            last = self.messages[-1]
            self.messages[-1] = {**last, "content": [*last["content"], *parts]}
            return
        self.messages = [*self.messages, {"role": self.fmt.observation_role, "content": parts}]

    # ----------------------------------------------------------------- finish
    def _finish(self, reason: FinishReason, error: str | None = None) -> None:
        if self.done:
            return
        self.done = True
        self.pending_call = None
        traj = self.trajectory
        traj.finish_reason = reason
        traj.error = error
        traj.final_answer = self.fmt.final_answer(self.generated)
        if not self.spec.tools:
            # notool: code the model wrote anyway is recorded as attempted, never executed
            traj.tool_calls = [
                ToolCall(code=c, executed=False) for c in self.fmt.calls(self.generated)
            ]

    def fail(self, reason: FinishReason, error: str) -> None:
        """End the episode for a reason outside the model (bad input image, sandbox failure)."""
        self._finish(reason, error=error)

    def _image_key(self, image: Image.Image) -> str:
        return self.store.put(image) if self.store is not None else image_key(image)
