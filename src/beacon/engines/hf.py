"""The `hf` engine: transformers `generate` over any `AutoModelForImageTextToText`, CPU or GPU.

Requests run in left-padded batches of `batch_size`; every sampling setting may differ within a
batch (each row stops on its own and is sampled on its own). A request with `prompt_ids` (+
`images` in placeholder order) is run on exactly those ids; otherwise its `messages` are rendered
with the checkpoint's chat template and tokenized. `agenerate` puts requests on a batching queue
(`beacon.engines.batching`): whatever is pending when the model is free runs as one batch, so
many independent episodes still share batches.

Sampling is per request: transformers runs greedy over logits that `_RowSampler` has already
sampled, row by row, with the request's temperature, top-k, top-p and its own `torch.Generator`
seeded from `SamplingParams.seed`. So a seeded request samples the same tokens whatever else is in
its batch (at any concurrency), which one-seed-per-batch cannot give. (Batched and single-row
forward passes may differ in the last float bits; a draw can flip only when it falls that close
to a boundary between two tokens' probability mass.)

Log-probs: `GenerationResult.logprobs[t]` is log softmax of the model's *raw* logits (temperature
1, no top-p/top-k, before any custom logits processor) at the sampled token. That is the policy's
own probability, which is what importance ratios and KL terms need; it is the same quantity vLLM
returns with its default `logprobs_mode="raw_logprobs"`. Forced tokens (a test's
`beacon.fakes.logits.ScriptedTokens`) therefore get the model's log-prob of the forced token,
however small. With `SamplingParams.top_logprobs = k`, `GenerationResult.top_logprobs[t]` lists
the k most likely tokens of the same raw distribution (what a served teacher gives for
distillation).

Vision tokens (image/video pads and their brackets) are never sampled: only the processor
writes them, and a generated one would break the next turn.

Stop strings: generation of a row ends at the first step whose decoded output contains one of
its stop strings; the result keeps every token up to and including that step, so `text ==
tokenizer.decode(token_ids)` and `text` ends with (or, if the last token runs past it, contains)
the stop string. End-of-sequence tokens are kept in `token_ids` too: training must learn them.

Scoring: `score(requests)` gives teacher-forced log-probs of given tokens after a context
(`beacon.engines.scoring`), from the same raw logits, in one forward pass per request; the
gated mode's p_tool (`beacon.agent.gate`) is computed with it.

Not covered: beam search, per-request logits processors (the hook is engine-wide), streaming.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from transformers import (
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    GenerationConfig,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
)

from beacon.engines.base import GenerationRequest, GenerationResult, SamplingParams, TopLogprob
from beacon.engines.batching import BatchingQueue
from beacon.engines.patch_embed import linear_patch_embeddings
from beacon.engines.scoring import ScoreRequest, ScoreResult
from beacon.engines.tokenizer import HFTokenizer
from beacon.engines.weights import WeightSpec, describe_problems, weight_problems, weight_specs
from beacon.images import PerImage, Recent, pixel_key

logger = logging.getLogger(__name__)

LogitsProcessorLike = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

LogitsProcessorFactory = Callable[[HFTokenizer], Sequence[LogitsProcessorLike]]
"""Builds an engine's logits processors from its tokenizer, for code that builds the engine
inside (`train.core.setup.rollout_engine`, `run_grpo`, `run_opd`): a processor that steers
toward given text needs the token ids of that text. Tests pass one (`beacon.fakes.logits`)."""

PIXEL_BUDGET = 256 << 20
"""Bytes of processed images kept by pixel hash: a GRPO group's G rollouts share their prompt
image and mostly the same crop, and processing (resize, normalise, patchify) was ~20% of the
demo's generation time when every copy was processed again."""


def _nbytes(tensors: Mapping[str, torch.Tensor]) -> int:
    return sum(t.element_size() * t.nelement() for t in tensors.values())


@dataclass
class _Prepared:
    """One request ready for the model."""

    index: int
    prompt_ids: list[int]
    images: list[Image.Image]
    sampling: SamplingParams


def __getattr__(name: str) -> Any:
    """`ScriptedTokens` moved to `beacon.fakes.logits`; this re-export goes after one release."""
    if name == "ScriptedTokens":
        # lazy: the old path of a test fake; the product imports nothing from fakes
        from beacon.fakes.logits import ScriptedTokens

        warnings.warn(
            "beacon.engines.hf.ScriptedTokens moved to beacon.fakes.logits.ScriptedTokens",
            DeprecationWarning,
            stacklevel=2,
        )
        return ScriptedTokens
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class HFEngine:
    """Generation with transformers on one device; thread-safe (one batch at a time)."""

    name = "hf"

    def __init__(
        self,
        model_path: str | Path,
        device: str = "cpu",
        dtype: str | torch.dtype = "auto",
        batch_size: int = 8,
        logits_processors: Sequence[LogitsProcessorLike] | None = None,
        batch_wait_s: float = 0.002,
        tokenizer: HFTokenizer | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be at least 1")
        self.model_path = str(model_path)
        self.device = torch.device(device)
        self.batch_size = batch_size
        self.logits_processors: list[LogitsProcessorLike] = list(logits_processors or [])
        # a run's one handle when given (OPD: student, teacher and their engines share it)
        self.tokenizer = tokenizer or HFTokenizer.from_pretrained(model_path)
        self.model = _load_model(self.model_path, self.device, dtype)
        # prompt + new tokens the model has positions for; `beacon serve` refuses longer requests
        self.max_model_len: int | None = getattr(
            self.model.config.get_text_config(), "max_position_embeddings", None
        )
        self._lock = threading.Lock()
        self._batch_wait_s = batch_wait_s
        self._queue: BatchingQueue | None = None
        self._recent_pixels = Recent(self._process_image, pixel_key, _nbytes, PIXEL_BUDGET)
        self._pixels = PerImage(self._recent_pixels)

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """`generate` for asyncio callers: requests join the batching queue, and whatever is
        pending when the model is free runs as one batch (up to `batch_size`)."""
        if self._queue is None:
            with self._lock:
                if self._queue is None:
                    self._queue = BatchingQueue(
                        self.generate, self.batch_size, self._batch_wait_s, name="hf-batcher"
                    )
        return await self._queue.agenerate(requests)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Results in request order; a failing request gives finish_reason="error"."""
        results: dict[int, GenerationResult] = {}
        prepared: list[_Prepared] = []
        for index, request in enumerate(requests):
            try:
                prepared.append(self._prepare(index, request))
            except Exception as exc:  # a bad request is a recorded error, never a dead batch
                results[index] = GenerationResult.failed(exc)
        with self._lock:
            for batch in _batches(prepared, self.batch_size):
                for item, result in zip(batch, self._run_isolated(batch), strict=True):
                    results[item.index] = result
        return [results[i] for i in range(len(requests))]

    def score(self, requests: Sequence[ScoreRequest]) -> list[ScoreResult]:
        """Teacher-forced log-probs (`beacon.engines.scoring`), exact: one forward pass over
        context + continuation per request, in batches of `batch_size`, keeping only the last
        positions' logits. A failing request gives a result with `error`, never raises."""
        results: dict[int, ScoreResult] = {}
        prepared: list[tuple[_Prepared, ScoreRequest]] = []
        for index, request in enumerate(requests):
            try:
                item = self._prepare(index, request.request)
            except Exception as exc:  # a bad request is a recorded error, never a dead batch
                results[index] = ScoreResult(error=f"{type(exc).__name__}: {exc}")
                continue
            forced = replace(item, prompt_ids=[*item.prompt_ids, *request.continuation])
            prepared.append((forced, request))
        with self._lock, torch.no_grad():
            for start in range(0, len(prepared), self.batch_size):
                chunk = prepared[start : start + self.batch_size]
                try:
                    scored = self._score_batch(chunk)
                except Exception as exc:
                    logger.warning("scoring failed: %s: %s", type(exc).__name__, exc)
                    scored = [ScoreResult(error=f"{type(exc).__name__}: {exc}") for _ in chunk]
                for (item, _), result in zip(chunk, scored, strict=True):
                    results[item.index] = result
        return [results[i] for i in range(len(requests))]

    def _score_batch(self, chunk: list[tuple[_Prepared, ScoreRequest]]) -> list[ScoreResult]:
        """Left padding aligns every row's end, so the last `keep` positions hold each row's
        continuation: position T-1-m+i predicts continuation[i], position T-1 the next token."""
        keep = max(len(request.continuation) for _, request in chunk) + 1
        inputs = self._model_inputs([item for item, _ in chunk])
        logits = self.model(**inputs, logits_to_keep=keep).logits  # [B, keep, V]
        logp = torch.log_softmax(logits.float(), dim=-1).cpu()
        out = []
        for row, (_, request) in enumerate(chunk):
            m = len(request.continuation)
            steps = logp[row, keep - 1 - m :]  # [m + 1, V]
            forced = steps[torch.arange(m), torch.tensor(request.continuation, dtype=torch.long)]
            following = steps[m, torch.tensor(request.candidates, dtype=torch.long)]
            out.append(ScoreResult(forced.tolist(), following.tolist()))
        return out

    def update_weights(
        self, named_tensors: Iterable[tuple[str, torch.Tensor]], exact_dtype: bool = False
    ) -> int:
        """Copy trainer weights into the model by parameter name; returns how many were set.

        Names are the model's `state_dict()` keys. The whole push is checked first
        (`beacon.engines.weights.weight_problems`: names, shapes, finite values, and dtypes
        when `exact_dtype`), and a push with any problem raises ValueError with nothing copied:
        a half-applied or broadcast update would leave a policy no trainer ever had. The copy
        runs under the lock generation takes, so no batch sees half of it.
        """
        tensors = dict(named_tensors)
        params = self.model.state_dict()
        problems = weight_problems(tensors, self.weight_specs(), exact_dtype)
        if problems:
            raise ValueError(describe_problems(problems))
        with self._lock, torch.no_grad():
            for name, tensor in tensors.items():
                params[name].copy_(tensor.to(params[name].device, params[name].dtype))
        return len(tensors)

    def load_weights(
        self, state_dict: Mapping[str, torch.Tensor], exact_dtype: bool = False
    ) -> int:
        """`update_weights` from a state dict."""
        return self.update_weights(state_dict.items(), exact_dtype)

    def weight_specs(self) -> dict[str, WeightSpec]:
        """Name, shape and dtype of every weight a push may replace."""
        return weight_specs(self.model)

    def close(self) -> None:
        """Drop the model and the cached pixels and stop the batching queue, so the memory is free
        before the next engine loads."""
        if self._queue is not None:
            self._queue.close()
        self.model = None
        self._recent_pixels.clear()  # up to PIXEL_BUDGET of tensors
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _prepare(self, index: int, request: GenerationRequest) -> _Prepared:
        _check_sampling(request.sampling)
        ids, images = self.tokenizer.request_ids(request)
        if request.prompt_ids is not None:
            self._check_image_tokens(ids, images)
        if not ids:
            raise ValueError("the prompt is empty; give messages or prompt_ids")
        return _Prepared(index, ids, images, request.sampling)

    def _check_image_tokens(self, ids: list[int], images: list[Image.Image]) -> None:
        """Each run of image tokens must be as long as its image needs, in order."""
        runs = _runs_of(ids, self.tokenizer.image_token_id)
        needed = [self.tokenizer.image_token_count(im) for im in images]
        if runs != needed:
            raise ValueError(
                f"prompt_ids hold image token runs of lengths {runs} but the {len(images)} "
                f"images need {needed}; encode the prompt with "
                f"engine.tokenizer.encode(text, images), images in placeholder order"
            )

    def _run_isolated(self, batch: list[_Prepared]) -> list[GenerationResult]:
        """Run a batch; if it fails, run its requests one by one so only the bad one errors."""
        try:
            return self._run_batch(batch)
        except Exception as exc:
            if len(batch) == 1:
                logger.warning("generation failed: %s: %s", type(exc).__name__, exc)
                return [GenerationResult.failed(exc)]
            logger.warning("batch of %d failed (%s); retrying one by one", len(batch), exc)
            return [self._run_isolated([item])[0] for item in batch]

    def _run_batch(self, batch: list[_Prepared]) -> list[GenerationResult]:
        rows = [b.sampling for b in batch]
        inputs = self._model_inputs(batch)
        prompt_len = inputs["input_ids"].shape[1]
        recorder = None
        if any(r.logprobs or r.top_logprobs for r in rows):
            recorder = _SampledTokenLogProbs(max(r.top_logprobs for r in rows))
        processors: list[LogitsProcessorLike] = [recorder] if recorder is not None else []
        if self.tokenizer.vision_token_ids:  # after the recorder: log-probs stay the raw ones
            processors.append(_Suppress(self.tokenizer.vision_token_ids))
        sampler = _RowSampler(rows, self.device)
        stops = _StopStrings(self.tokenizer, rows, prompt_len)
        longest = max(r.max_new_tokens for r in rows)
        with torch.no_grad():
            out = self.model.generate(
                **inputs,
                generation_config=self._generation_config(longest),
                logits_processor=LogitsProcessorList(
                    [*processors, *self.logits_processors, sampler]
                ),
                stopping_criteria=StoppingCriteriaList([stops]),
            )
        sequences = out if isinstance(out, torch.Tensor) else out.sequences
        generated = sequences[:, prompt_len:].tolist()
        recorded = recorder.finish(sequences) if recorder is not None else None
        return [
            self._result(row, generated[row], recorded, stops, batch) for row in range(len(batch))
        ]

    def _result(
        self,
        row: int,
        generated: list[int],
        recorded: _Recorded | None,
        stops: _StopStrings,
        batch: list[_Prepared],
    ) -> GenerationResult:
        end = min(len(generated), batch[row].sampling.max_new_tokens)
        finish, stop_reason = "length", None
        eos = set(self.tokenizer.eos_token_ids)
        first_eos = next((i for i, t in enumerate(generated[:end]) if t in eos), None)
        if first_eos is not None:
            end, finish = first_eos + 1, "stop"
        if row in stops.matched and stops.matched[row][0] <= end:
            end, finish = stops.matched[row][0], "stop"
            stop_reason = stops.matched[row][1]
        token_ids = generated[:end]
        sampling = batch[row].sampling
        logprobs = top = None
        if recorded is not None and sampling.logprobs:
            logprobs = [float(x) for x in recorded.logprobs[row, :end].tolist()]
        if recorded is not None and sampling.top_logprobs:
            top = recorded.top(row, end, sampling.top_logprobs)
        return GenerationResult(
            text=self.tokenizer.decode(token_ids),
            token_ids=token_ids,
            logprobs=logprobs,
            top_logprobs=top,
            finish_reason=finish,
            stop_reason=stop_reason,
            prompt_ids=batch[row].prompt_ids,
        )

    def _model_inputs(self, batch: list[_Prepared]) -> dict[str, torch.Tensor]:
        """Left-padded ids, attention mask and (if any image) pixel inputs, on the device."""
        width = max(len(b.prompt_ids) for b in batch)
        pad = self.tokenizer.pad_token_id
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, item in enumerate(batch):
            n = len(item.prompt_ids)
            ids[row, width - n :] = torch.tensor(item.prompt_ids, dtype=torch.long)
            mask[row, width - n :] = 1
        inputs: dict[str, torch.Tensor] = {"input_ids": ids, "attention_mask": mask}
        images = [im for item in batch for im in item.images]
        if images:
            per_image = [self._pixels(image) for image in images]
            inputs.update({k: torch.cat([p[k] for p in per_image]) for k in per_image[0]})
            image_token = self.tokenizer.image_token_id
            inputs["mm_token_type_ids"] = (ids == image_token).to(torch.int)
            inputs["pixel_values"] = inputs["pixel_values"].to(self.model.dtype)
        return {k: v.to(self.device) for k, v in inputs.items()}

    def _process_image(self, image: Image.Image) -> dict[str, torch.Tensor]:
        """The image processor's tensors for one image; a batch's are these, concatenated
        (Qwen-VL processors work image by image and stack patches and grids along dim 0)."""
        out = self.tokenizer.processor.image_processor(images=[image], return_tensors="pt")
        return dict(out)

    def _generation_config(self, max_new_tokens: int) -> Any:
        """Greedy over what `_RowSampler` leaves (it samples each row itself), with every knob
        that shapes the distribution set, so the checkpoint's defaults (Qwen ships top_k=1,
        repetition_penalty=1.05) never leak into sampling."""
        return GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=False,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            num_beams=1,
            min_new_tokens=0,
            eos_token_id=self.tokenizer.eos_token_ids,
            pad_token_id=self.tokenizer.pad_token_id,
            bos_token_id=None,
        )


def _runs_of(ids: list[int], token: int | None) -> list[int]:
    """Lengths of the maximal runs of `token` in `ids`, in order."""
    runs: list[int] = []
    previous = None
    for t in ids:
        if t == token:
            if previous == token:
                runs[-1] += 1
            else:
                runs.append(1)
        previous = t
    return runs


class _Suppress:
    """Sets the logits of `token_ids` to -inf, so they are never sampled."""

    def __init__(self, token_ids: Sequence[int]) -> None:
        self.token_ids = list(token_ids)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.clone()
        scores[:, self.token_ids] = float("-inf")
        return scores


@dataclass
class _Recorded:
    """Raw log-probs of one batch: the sampled tokens' [batch, T] and, if asked, the top-k
    alternatives' values and ids, [batch, T, k] each (k = the largest any row asked for)."""

    logprobs: torch.Tensor
    top_values: torch.Tensor | None
    top_ids: torch.Tensor | None

    def top(self, row: int, end: int, k: int) -> list[list[TopLogprob]]:
        """The row's k most likely tokens at each of its first `end` positions."""
        values = self.top_values[row, :end, :k].tolist()
        ids = self.top_ids[row, :end, :k].tolist()
        return [
            [TopLogprob(int(i), float(v)) for i, v in zip(pos_ids, pos_values, strict=True)]
            for pos_ids, pos_values in zip(ids, values, strict=True)
        ]


class _SampledTokenLogProbs:
    """Records log softmax(raw logits)[sampled token] per step with O(batch x vocab) memory,
    and the top `top_k` log-probs of each step when `top_k > 0`.

    Called first among the logits processors, it sees the raw logits of step t and, at step
    t + 1, the token sampled at t (the last column of `input_ids`).
    """

    def __init__(self, top_k: int = 0) -> None:
        self.top_k = top_k
        self._previous: torch.Tensor | None = None
        self._steps: list[torch.Tensor] = []
        self._top: list[torch.return_types.topk] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self._previous is not None:
            self._steps.append(self._previous.gather(1, input_ids[:, -1:]).squeeze(1))
        self._previous = torch.log_softmax(scores.float(), dim=-1)
        if self.top_k:
            self._top.append(torch.topk(self._previous, self.top_k, dim=-1))
        return scores

    def finish(self, sequences: torch.Tensor) -> _Recorded:
        """The recorded log-probs, once generation has ended."""
        if self._previous is not None:
            self._steps.append(self._previous.gather(1, sequences[:, -1:]).squeeze(1))
            self._previous = None
        batch = sequences.shape[0]
        if not self._steps:
            logprobs = torch.zeros((batch, 0))
        else:
            logprobs = torch.stack(self._steps, dim=1).cpu()
        if not self.top_k:
            return _Recorded(logprobs, None, None)
        if not self._top:
            empty = torch.zeros((batch, 0, self.top_k))
            return _Recorded(logprobs, empty, empty.long())
        values = torch.stack([t.values for t in self._top], dim=1).cpu()
        ids = torch.stack([t.indices for t in self._top], dim=1).cpu()
        return _Recorded(logprobs, values, ids)


class _RowSampler:
    """Samples every row on its own: the row's temperature, top-k and top-p, and its own
    `torch.Generator` seeded from the row's seed (an unseeded row draws its seed from torch's
    global generator). Greedy rows (temperature 0) pass through to the greedy search.

    Placed last among the logits processors, it turns a sampled row's scores into a one-hot
    choice (0 at the drawn token, -inf elsewhere) that the greedy search then takes. The
    warping order is transformers' own: temperature, then top-k, then top-p.
    """

    def __init__(self, rows: Sequence[SamplingParams], device: torch.device) -> None:
        self.rows = list(rows)
        self.generators = [
            _row_generator(r.seed, device) if r.temperature > 0 else None for r in self.rows
        ]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if all(g is None for g in self.generators):
            return scores
        out = scores.clone()
        for row, (params, generator) in enumerate(zip(self.rows, self.generators, strict=True)):
            if generator is None:
                continue
            probs = _sampling_probs(scores[row].float(), params)
            token = torch.multinomial(probs, 1, generator=generator)
            out[row] = float("-inf")
            out[row, token] = 0.0
        return out


def _row_generator(seed: int | None, device: torch.device) -> torch.Generator:
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item())
    return torch.Generator(device=device).manual_seed(seed)


def _sampling_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """softmax(logits / T) restricted to the top-k, then to the top-p nucleus (at least one
    token kept), as transformers' Temperature/TopK/TopP warpers compute it. logits: [vocab]."""
    logits = logits / params.temperature
    if 0 < params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        ordered, order = torch.sort(logits)
        cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative <= 1 - params.top_p
        drop[-1] = False
        logits = logits.masked_fill(drop.scatter(0, order, drop), float("-inf"))
    return logits.softmax(dim=-1)


class _StopStrings(StoppingCriteria):
    """Per-row stop strings and token limits: a row is done at the first step whose output
    contains one of its stop strings (`matched[row] = (generated length, stop string)`) or
    that reaches its own max_new_tokens (rows of a batch may have different limits)."""

    def __init__(self, tokenizer: HFTokenizer, rows: list[SamplingParams], prompt_len: int):
        self.tokenizer = tokenizer
        self.stops = [r.stop for r in rows]
        self.limits = [r.max_new_tokens for r in rows]
        self.prompt_len = prompt_len
        longest = max((len(s.encode()) for r in rows for s in r.stop), default=0)
        self.window = longest + 2  # a token covers at least one byte
        self.matched: dict[int, tuple[int, str]] = {}

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        generated = input_ids.shape[1] - self.prompt_len
        done = torch.tensor([generated >= limit for limit in self.limits])
        for row, stops in enumerate(self.stops):
            if row in self.matched:
                done[row] = True
            elif stops and generated > 0:
                start = input_ids.shape[1] - min(generated, self.window)
                tail = self.tokenizer.decode(input_ids[row, start:].tolist())
                hit = next((s for s in stops if s in tail), None)
                if hit is not None:
                    self.matched[row] = (generated, hit)
                    done[row] = True
        return done.to(input_ids.device)


def _batches(items: list[_Prepared], size: int) -> Iterable[list[_Prepared]]:
    """Chunks of at most `size` requests. Nothing about sampling splits a batch: each row is
    sampled with its own settings and generator (`_RowSampler`) and stops on its own."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _check_sampling(s: SamplingParams) -> None:
    problems = []
    if s.temperature < 0:
        problems.append(f"temperature={s.temperature} must be >= 0")
    if not 0 < s.top_p <= 1:
        problems.append(f"top_p={s.top_p} must be in (0, 1]")
    if s.top_k < 0:
        problems.append(f"top_k={s.top_k} must be >= 0 (0 disables it)")
    if s.max_new_tokens < 1:
        problems.append(f"max_new_tokens={s.max_new_tokens} must be >= 1")
    if s.top_logprobs < 0:
        problems.append(f"top_logprobs={s.top_logprobs} must be >= 0")
    if problems:
        raise ValueError("bad sampling parameters: " + "; ".join(problems))


def _load_model(path: str, device: torch.device, dtype: str | torch.dtype) -> Any:
    if dtype == "auto":
        dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    elif isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    try:
        model = AutoModelForImageTextToText.from_pretrained(path, dtype=dtype)
    except ValueError:  # a text-only checkpoint
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    linear_patch_embeddings(model)
    return model.to(device).eval()
