"""The `vllm` engine: offline `vllm.LLM`, colocated with training, with weight updates.

Every request goes to vLLM as a token prompt (`{"prompt_token_ids": ..., "multi_modal_data":
{"image": [...]}}`): either the request's own `prompt_ids` + `images` (token-in) or its messages
rendered and tokenized locally with the same `HFTokenizer` the `hf` engine uses, so both engines
see identical ids. vLLM expands image placeholders itself, so each run of image tokens is
collapsed to one token before sending (the "raw prompt ids" verl also gives vLLM); the result's
`prompt_ids` are the expanded ids, as the `hf` engine reports them.

Sampling uses `include_stop_str_in_output=True` and `logprobs=0` (the sampled token's log-prob
only); vLLM's default `logprobs_mode="raw_logprobs"` gives the log softmax of the raw logits, the
same quantity the `hf` engine records. `text` is always `tokenizer.decode(token_ids)`.

Weight sync: `update_weights(named_tensors)` sends (name, tensor) pairs to every vLLM worker
through `LLM.collective_rpc` and the worker extension `WeightSyncExtension` below, which calls
the model's own `load_weights` (so Hugging Face checkpoint names are accepted and mapped), then
resets the prefix cache. Tensors travel by value: fine for small and mid-size models; for large
ones, vLLM's CUDA-IPC / NCCL recipes (examples/offline_inference/rlhf*.py) are the next step.

Not verified on a GPU yet: the check machine had no vLLM. `benchmarks/gpu_check_vllm.sh` and
tests/engines/test_vllm.py are the checks to run where it is installed.

vLLM is optional: `import beacon.engines` works without it; constructing `VLLMEngine` without it
raises an ImportError that says how to install it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from beacon.engines.base import GenerationRequest, GenerationResult, SamplingParams
from beacon.engines.tokenizer import HFTokenizer

logger = logging.getLogger(__name__)

WORKER_EXTENSION = "beacon.engines.vllm.WeightSyncExtension"


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(
            "the vllm engine needs vLLM, which is not installed: run "
            "`pip install beacon-vr[vllm]` on a machine with a CUDA GPU, or use engine 'hf'"
        ) from exc
    return vllm


class VLLMEngine:
    """Offline vLLM generation with the `Engine` interface and trainer weight updates."""

    name = "vllm"

    def __init__(
        self,
        model_path: str | Path,
        gpu_memory_utilization: float = 0.5,
        max_model_len: int | None = None,
        dtype: str = "auto",
        seed: int = 0,
        enforce_eager: bool = False,
        enable_sleep_mode: bool = False,
        **llm_kwargs: Any,
    ) -> None:
        vllm = _import_vllm()
        self.model_path = str(model_path)
        self.tokenizer = HFTokenizer.from_pretrained(model_path)
        self.llm = vllm.LLM(
            model=self.model_path,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            dtype=dtype,
            seed=seed,
            enforce_eager=enforce_eager,
            enable_sleep_mode=enable_sleep_mode,
            worker_extension_cls=WORKER_EXTENSION,
            **llm_kwargs,
        )

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Results in request order; a failing request gives finish_reason="error"."""
        results: dict[int, GenerationResult] = {}
        prompts, params, indices, expanded = [], [], [], []
        for index, request in enumerate(requests):
            try:
                prompt, ids = self._prompt(request)
                params.append(self._sampling(request.sampling))
                prompts.append(prompt)
                expanded.append(ids)
                indices.append(index)
            except Exception as exc:
                results[index] = GenerationResult.failed(exc)
        if prompts:
            for index, ids, result in zip(
                indices, expanded, self._run(prompts, params), strict=True
            ):
                result.prompt_ids = ids if result.finish_reason != "error" else None
                results[index] = result
        return [results[i] for i in range(len(requests))]

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> int:
        """Load (name, tensor) pairs into every worker's model; returns how many were sent."""
        weights = [(name, tensor.detach().cpu()) for name, tensor in named_tensors]
        self.llm.collective_rpc("beacon_load_weights", args=(weights,))
        self.llm.reset_prefix_cache()
        return len(weights)

    def load_weights(self, state_dict: dict[str, Any]) -> int:
        """`update_weights` from a state dict."""
        return self.update_weights(state_dict.items())

    def sleep(self, level: int = 1) -> None:
        """Free GPU memory for training (needs `enable_sleep_mode=True`)."""
        self.llm.sleep(level=level)

    def wake_up(self) -> None:
        self.llm.wake_up()

    def close(self) -> None:
        self.llm = None

    def _prompt(self, request: GenerationRequest) -> tuple[dict[str, Any], list[int]]:
        """(the vLLM prompt, the expanded prompt ids it stands for)."""
        ids, images = self.tokenizer.request_ids(request)
        return vllm_token_prompt(ids, images, self.tokenizer.image_token_id), ids

    def _sampling(self, s: SamplingParams) -> Any:
        vllm = _import_vllm()
        return vllm.SamplingParams(
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k if s.top_k > 0 else -1,
            max_tokens=s.max_new_tokens,
            stop=list(s.stop) or None,
            seed=s.seed,
            logprobs=0 if s.logprobs else None,
            include_stop_str_in_output=True,
            skip_special_tokens=False,
        )

    def _run(self, prompts: list[dict[str, Any]], params: list[Any]) -> list[GenerationResult]:
        try:
            outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=False)
        except Exception as exc:  # one bad prompt fails vLLM's whole call; isolate it
            if len(prompts) == 1:
                return [GenerationResult.failed(exc)]
            logger.warning("vLLM batch of %d failed (%s); retrying one by one", len(prompts), exc)
            return [self._run([p], [s])[0] for p, s in zip(prompts, params, strict=True)]
        return [self._result(out) for out in outputs]

    def _result(self, request_output: Any) -> GenerationResult:
        out = request_output.outputs[0]
        token_ids = list(out.token_ids)
        logprobs = None
        if out.logprobs is not None:
            steps = zip(out.logprobs, token_ids, strict=False)
            logprobs = [float(step[t].logprob) for step, t in steps]
        stop_reason = out.stop_reason if isinstance(out.stop_reason, str) else None
        return GenerationResult(
            text=self.tokenizer.decode(token_ids),
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason="length" if out.finish_reason == "length" else "stop",
            stop_reason=stop_reason,
        )


def vllm_token_prompt(
    ids: list[int], images: list[Any], image_token_id: int | None
) -> dict[str, Any]:
    """vLLM's token prompt: each run of image tokens collapsed to one (vLLM expands it)."""
    collapsed = [
        t for i, t in enumerate(ids) if not (t == image_token_id and i > 0 and ids[i - 1] == t)
    ]
    prompt: dict[str, Any] = {"prompt_token_ids": collapsed}
    if images:
        prompt["multi_modal_data"] = {"image": list(images)}
    return prompt


class WeightSyncExtension:
    """Methods vLLM mixes into each worker (`worker_extension_cls`); run via collective_rpc."""

    def beacon_load_weights(self, weights: list[tuple[str, Any]]) -> int:
        model = self.model_runner.model
        model.load_weights(weights=[(name, t.to(self.device)) for name, t in weights])
        return len(weights)

    def beacon_weight_abs_sum(self) -> float:
        """Sum of |w| over all parameters: lets a check see that an update arrived."""
        model = self.model_runner.model
        return float(sum(p.detach().abs().sum().item() for p in model.parameters()))
