"""The `hf` engine: transformers `generate` over any `AutoModelForImageTextToText`, CPU or GPU.

Requests are grouped by sampling distribution and run in left-padded batches of `batch_size`;
stop strings, max_new_tokens and seeds may differ within a batch (each row stops on its own; the
batch is seeded with its first request's seed, so identical calls give identical results).
A request with `prompt_ids` (+ `images` in placeholder order) is run on exactly those ids;
otherwise its `messages` are rendered with the checkpoint's chat template and tokenized.

Log-probs: `GenerationResult.logprobs[t]` is log softmax of the model's *raw* logits (temperature
1, no top-p/top-k, before any custom logits processor) at the sampled token. That is the policy's
own probability, which is what importance ratios and KL terms need; it is the same quantity vLLM
returns with its default `logprobs_mode="raw_logprobs"`. Forced tokens (see `ScriptedTokens`)
therefore get the model's log-prob of the forced token, however small.

Vision tokens (image/video pads and their brackets) are never sampled: only the processor
writes them, and a generated one would break the next turn.

Stop strings: generation of a row ends at the first step whose decoded output contains one of
its stop strings; the result keeps every token up to and including that step, so `text ==
tokenizer.decode(token_ids)` and `text` ends with (or, if the last token runs past it, contains)
the stop string. End-of-sequence tokens are kept in `token_ids` too: training must learn them.

Not covered: beam search, per-request logits processors (the hook is engine-wide), streaming.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
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

from beacon.engines.base import GenerationRequest, GenerationResult, SamplingParams
from beacon.engines.tokenizer import HFTokenizer

logger = logging.getLogger(__name__)

LogitsProcessorLike = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class _Prepared:
    """One request ready for the model."""

    index: int
    prompt_ids: list[int]
    images: list[Image.Image]
    sampling: SamplingParams


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
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be at least 1")
        self.model_path = str(model_path)
        self.device = torch.device(device)
        self.batch_size = batch_size
        self.logits_processors: list[LogitsProcessorLike] = list(logits_processors or [])
        self.tokenizer = HFTokenizer.from_pretrained(model_path)
        self.model = _load_model(self.model_path, self.device, dtype)
        self._lock = threading.Lock()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Results in request order; a failing request gives finish_reason="error"."""
        results: dict[int, GenerationResult] = {}
        prepared: list[_Prepared] = []
        for index, request in enumerate(requests):
            try:
                prepared.append(self._prepare(index, request))
            except Exception as exc:  # a bad request is a recorded error, never a dead batch
                results[index] = _error_result(exc)
        with self._lock:
            for batch in _batches(prepared, self.batch_size):
                for item, result in zip(batch, self._run_isolated(batch), strict=True):
                    results[item.index] = result
        return [results[i] for i in range(len(requests))]

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Copy trainer weights into the model by parameter name; returns how many were set.

        Names are the model's `state_dict()` keys. An unknown name is an error (a silent
        mismatch would leave the policy stale).
        """
        params = self.model.state_dict()
        count = 0
        with self._lock, torch.no_grad():
            for name, tensor in named_tensors:
                if name not in params:
                    raise KeyError(
                        f"weight {name!r} is not a parameter of {self.model_path}; send the "
                        f"names of model.state_dict() of the same architecture"
                    )
                params[name].copy_(tensor.to(params[name].device, params[name].dtype))
                count += 1
        return count

    def load_weights(self, state_dict: Mapping[str, torch.Tensor]) -> int:
        """`update_weights` from a state dict."""
        return self.update_weights(state_dict.items())

    def close(self) -> None:
        self.model = None
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
                return [_error_result(exc)]
            logger.warning("batch of %d failed (%s); retrying one by one", len(batch), exc)
            return [self._run_isolated([item])[0] for item in batch]

    def _run_batch(self, batch: list[_Prepared]) -> list[GenerationResult]:
        sampling = batch[0].sampling
        inputs = self._model_inputs(batch)
        prompt_len = inputs["input_ids"].shape[1]
        recorder = _SampledTokenLogProbs() if sampling.logprobs else None
        processors = [recorder] if recorder is not None else []
        if self.tokenizer.vision_token_ids:  # after the recorder: log-probs stay the raw ones
            processors.append(_Suppress(self.tokenizer.vision_token_ids))
        stops = _StopStrings(self.tokenizer, [b.sampling for b in batch], prompt_len)
        longest = max(b.sampling.max_new_tokens for b in batch)
        with torch.no_grad(), _seeded(sampling.seed, self.device):
            out = self.model.generate(
                **inputs,
                generation_config=self._generation_config(sampling, longest),
                logits_processor=LogitsProcessorList([*processors, *self.logits_processors]),
                stopping_criteria=StoppingCriteriaList([stops]),
            )
        sequences = out if isinstance(out, torch.Tensor) else out.sequences
        generated = sequences[:, prompt_len:].tolist()
        logprobs = recorder.finish(sequences).tolist() if recorder is not None else None
        return [
            self._result(row, generated[row], logprobs[row] if logprobs else None, stops, batch)
            for row in range(len(batch))
        ]

    def _result(
        self,
        row: int,
        generated: list[int],
        logprobs: list[float] | None,
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
        return GenerationResult(
            text=self.tokenizer.decode(token_ids),
            token_ids=token_ids,
            logprobs=[float(x) for x in logprobs[:end]] if logprobs is not None else None,
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
            pixels = self.tokenizer.processor.image_processor(images=images, return_tensors="pt")
            inputs.update(pixels)
            image_token = self.tokenizer.image_token_id
            inputs["mm_token_type_ids"] = (ids == image_token).to(torch.int)
            inputs["pixel_values"] = inputs["pixel_values"].to(self.model.dtype)
        return {k: v.to(self.device) for k, v in inputs.items()}

    def _generation_config(self, sampling: SamplingParams, max_new_tokens: int) -> Any:
        """A config that sets every knob that shapes the distribution, so the checkpoint's
        defaults (Qwen ships top_k=1, repetition_penalty=1.05) never leak into sampling."""
        sample = sampling.temperature > 0
        knobs = {"temperature": sampling.temperature, "top_p": sampling.top_p}
        knobs["top_k"] = sampling.top_k
        return GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=sample,
            **(knobs if sample else {}),  # greedy ignores them; setting them only warns
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            num_beams=1,
            min_new_tokens=0,
            eos_token_id=self.tokenizer.eos_token_ids,
            pad_token_id=self.tokenizer.pad_token_id,
            bos_token_id=None,
        )


class ScriptedTokens:
    """A logits processor that forces the model to write `script` (a list of token ids).

    Stateless: at each step it finds the longest suffix of the row's ids that is a prefix of the
    script and forces the next script token, so every generate call writes the script from its
    start (and starts over after finishing it; end the script with a stop string or EOS). For
    tests and demos: a random tiny model never writes a code block by itself.
    """

    def __init__(self, script: Sequence[int]) -> None:
        if not script:
            raise ValueError("ScriptedTokens needs a non-empty script of token ids")
        self.script = list(script)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        forced = torch.full_like(scores, float("-inf"))
        for row in range(input_ids.shape[0]):
            step = _matched_prefix(input_ids[row].tolist(), self.script)
            forced[row, self.script[step % len(self.script)]] = 0.0
        return forced


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


def _matched_prefix(ids: list[int], script: list[int]) -> int:
    """Length of the longest suffix of `ids` (shorter than the script) that starts `script`."""
    for k in range(min(len(script) - 1, len(ids)), 0, -1):
        if ids[-k:] == script[:k]:
            return k
    return 0


class _Suppress:
    """Sets the logits of `token_ids` to -inf, so they are never sampled."""

    def __init__(self, token_ids: Sequence[int]) -> None:
        self.token_ids = list(token_ids)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.clone()
        scores[:, self.token_ids] = float("-inf")
        return scores


class _SampledTokenLogProbs:
    """Records log softmax(raw logits)[sampled token] per step with O(batch x vocab) memory.

    Called first among the logits processors, it sees the raw logits of step t and, at step
    t + 1, the token sampled at t (the last column of `input_ids`).
    """

    def __init__(self) -> None:
        self._previous: torch.Tensor | None = None
        self._steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self._previous is not None:
            self._steps.append(self._previous.gather(1, input_ids[:, -1:]).squeeze(1))
        self._previous = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """[batch, generated] log-probs, once generation has ended."""
        if self._previous is not None:
            self._steps.append(self._previous.gather(1, sequences[:, -1:]).squeeze(1))
            self._previous = None
        if not self._steps:
            return torch.zeros((sequences.shape[0], 0))
        return torch.stack(self._steps, dim=1).cpu()


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


@contextmanager
def _seeded(seed: int | None, device: torch.device) -> Iterator[None]:
    """Seed torch's generator for one call; the global RNG state is restored afterwards."""
    if seed is None:
        yield
        return
    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def _batches(items: list[_Prepared], size: int) -> Iterable[list[_Prepared]]:
    """Chunks of at most `size` requests sharing the sampling distribution (stop strings and
    max_new_tokens may differ: each row stops on its own).

    Seeds do not split batches: callers give every episode its own seed (so a resumed run
    samples what the first would have), and batches of one would cost most of the throughput.
    A sampled batch is seeded with its first request's seed, so a call reproduces exactly when
    the same requests come in the same order; greedy decoding ignores seeds anyway.
    """
    groups: dict[tuple, list[_Prepared]] = {}
    for item in items:
        s = item.sampling
        key = (s.temperature, s.top_p, s.top_k, s.logprobs)
        groups.setdefault(key, []).append(item)
    for group in groups.values():
        for start in range(0, len(group), size):
            yield group[start : start + size]


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
    if problems:
        raise ValueError("bad sampling parameters: " + "; ".join(problems))


def _error_result(exc: BaseException) -> GenerationResult:
    return GenerationResult(text="", finish_reason="error", error=f"{type(exc).__name__}: {exc}")


def _load_model(path: str, device: torch.device, dtype: str | torch.dtype) -> Any:
    if dtype == "auto":
        dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    elif isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    try:
        model = AutoModelForImageTextToText.from_pretrained(path, dtype=dtype)
    except ValueError:  # a text-only checkpoint
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model.to(device).eval()
