"""GPU check of the vllm engine on the tiny model: agreement with hf, weight sync, timings.

Run on a CUDA machine with vLLM installed (`pip install beacon-vr[vllm]`):

    python benchmarks/gpu_check_vllm.py [--arch qwen2_vl] [--dtype float32]

Prints the environment, then for each arch: prompts run through the hf engine (cuda) and the
vllm engine at temperature 0 with the number of identical token sequences and the largest
log-prob gap, a weight update that zeroes every weight (all log-probs must become -log V), and
load/generate timings. Exits non-zero if a check fails.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image


def _env() -> None:
    import torch
    import transformers

    print(
        f"python {platform.python_version()}  torch {torch.__version__}  "
        f"transformers {transformers.__version__}"
    )
    if torch.cuda.is_available():
        print(f"cuda {torch.version.cuda}  device {torch.cuda.get_device_name(0)}")
    try:
        import vllm

        print(f"vllm {vllm.__version__}")
    except ImportError as exc:
        print(f"vllm not importable: {exc}")


def _image(width: int, height: int, seed: int) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels, "RGB")


def _requests(n: int):
    from beacon.engines.base import GenerationRequest, SamplingParams

    greedy = SamplingParams(temperature=0.0, max_new_tokens=32, stop=["</answer>"])
    out = []
    for i in range(n):
        image, crop = _image(200 + 10 * i, 150 + 7 * i, i), _image(90, 120, 100 + i)
        user = {
            "role": "user",
            "content": [
                {"type": "image", "image": image},
                {"type": "text", "text": f"Question {i}?"},
            ],
        }
        if i % 2:
            observation = {
                "role": "assistant",
                "content": [
                    {
                        "type": "text",
                        "text": "<code>\n```python\nprint(1)\n```\n</code><sandbox_output>1",
                    },
                    {"type": "image", "image": crop},
                    {"type": "text", "text": "</sandbox_output>"},
                ],
            }
            out.append(GenerationRequest([user, observation], greedy, continue_final_message=True))
        else:
            out.append(GenerationRequest([user], greedy))
    return out


def check_hf_cuda(arch: str, n: int) -> bool:
    """No vLLM needed: the stock AutoProcessor (with torchvision) agrees with HFTokenizer, and
    the hf engine gives the same tokens on cuda as on cpu (float32)."""
    from transformers import AutoProcessor

    from beacon.engines.hf import HFEngine
    from beacon.engines.tiny import make_tiny_model

    path = make_tiny_model(Path(tempfile.mkdtemp()) / arch, arch=arch)
    print(f"\n== hf {arch}: cuda vs cpu, stock processor ==")
    cpu = HFEngine(path, device="cpu", batch_size=n)
    gpu = HFEngine(path, device="cuda", dtype="float32", batch_size=n)
    requests = _requests(n)
    first = requests[1]
    text = cpu.tokenizer.render_chat(first.messages, continue_final_message=True)
    from beacon.engines.tokenizer import message_images

    pictures = message_images(first.messages)
    try:
        stock = AutoProcessor.from_pretrained(path)
        ids = stock(text=[text], images=pictures, return_tensors="pt")["input_ids"][0].tolist()
        stock_ok = ids == cpu.tokenizer.encode(text, pictures)
        print(f"AutoProcessor -> {type(stock).__name__}; ids match HFTokenizer: {stock_ok}")
    except Exception as exc:
        stock_ok = False
        print(f"AutoProcessor failed: {type(exc).__name__}: {exc}")
    t = time.perf_counter()
    a = cpu.generate(requests)
    print(f"hf cpu  generate {time.perf_counter() - t:6.2f} s ({n} requests)")
    gpu.generate(requests[:1])  # warm-up
    t = time.perf_counter()
    b = gpu.generate(requests)
    print(f"hf cuda generate {time.perf_counter() - t:6.2f} s ({n} requests)")
    same, gap = compare(a, b)
    errors = [r.error for r in a + b if r.error]
    print(f"errors {errors[:3]}; identical outputs {same}/{n}; max |logprob gap| {gap:.2e}")
    ok = stock_ok and same == n and not errors
    print(f"hf {arch}: {'PASS' if ok else 'FAIL'}")
    return ok


def compare(a: list, b: list) -> tuple[int, float]:
    """(outputs with identical token ids, largest log-prob gap on those outputs)."""
    same = [(x, y) for x, y in zip(a, b, strict=True) if x.token_ids == y.token_ids]
    gaps = [abs(p - q) for x, y in same for p, q in zip(x.logprobs, y.logprobs, strict=True)]
    return len(same), max(gaps, default=float("nan"))


def check_arch(arch: str, dtype: str, n: int) -> bool:
    import torch

    from beacon.engines.base import GenerationRequest, SamplingParams
    from beacon.engines.hf import HFEngine
    from beacon.engines.tiny import make_tiny_model
    from beacon.engines.vllm import VLLMEngine

    path = make_tiny_model(Path(tempfile.mkdtemp()) / arch, arch=arch)
    print(f"\n== {arch} ({dtype}) ==")
    t = time.perf_counter()
    hf = HFEngine(path, device="cuda", dtype=dtype, batch_size=n)
    print(f"hf load      {time.perf_counter() - t:7.2f} s")
    t = time.perf_counter()
    vl = VLLMEngine(
        path, dtype=dtype, enforce_eager=True, max_model_len=4096, gpu_memory_utilization=0.3
    )
    print(f"vllm load    {time.perf_counter() - t:7.2f} s")
    requests = _requests(n)
    t = time.perf_counter()
    a = hf.generate(requests)
    print(f"hf generate  {time.perf_counter() - t:7.2f} s  ({n} requests)")
    t = time.perf_counter()
    b = vl.generate(requests)
    print(f"vllm generate{time.perf_counter() - t:7.2f} s  ({n} requests)")
    errors = [r.error for r in a + b if r.error]
    same_prompt = sum(x.prompt_ids == y.prompt_ids for x, y in zip(a, b, strict=True))
    same, gap = compare(a, b)
    print(f"errors: {errors[:3]}")
    print(
        f"identical prompt ids {same_prompt}/{n}, identical outputs {same}/{n}, "
        f"max |logprob gap| on identical outputs {gap:.2e}"
    )
    for x, y in list(zip(a, b, strict=True))[:2]:
        print(f"  hf  : {x.token_ids[:12]} {x.finish_reason}")
        print(f"  vllm: {y.token_ids[:12]} {y.finish_reason}")
    zeros = [(k, torch.zeros_like(v)) for k, v in hf.model.state_dict().items()]
    t = time.perf_counter()
    vl.update_weights(zeros)
    print(f"update_weights {time.perf_counter() - t:6.2f} s ({len(zeros)} tensors)")
    abs_sum = vl.llm.collective_rpc("beacon_weight_abs_sum")
    params = SamplingParams(temperature=1.0, max_new_tokens=4, seed=0)
    [z] = vl.generate([GenerationRequest(requests[0].messages, params)])
    vocab = hf.model.get_output_embeddings().weight.shape[0]
    uniform = bool(z.logprobs) and all(abs(lp + math.log(vocab)) < 1e-3 for lp in z.logprobs)
    print(
        f"after zeroing: weight |sum| per worker {abs_sum}, logprobs {z.logprobs} "
        f"(uniform -log V = {-math.log(vocab):.4f}: {uniform})"
    )
    vl.close()
    del vl
    ok = not errors and same_prompt == n and same == n and uniform
    print(f"{arch}: {'PASS' if ok else 'FAIL'}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", action="append", help="qwen2_vl, qwen2_5_vl, qwen3_vl")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--requests", type=int, default=8)
    args = parser.parse_args()
    _env()
    results = {}
    try:
        import vllm  # noqa: F401

        checks = {"vllm": check_arch}
    except ImportError:
        print("vLLM is not installed: only the hf-on-cuda checks run")
        checks = {}
    for arch in args.arch or ["qwen2_vl"]:
        for name, check in {"hf": lambda a, d, n: check_hf_cuda(a, n), **checks}.items():
            try:
                results[f"{name} {arch}"] = check(arch, args.dtype, args.requests)
            except Exception as exc:
                print(f"{name} {arch}: FAILED with {type(exc).__name__}: {exc}")
                results[f"{name} {arch}"] = False
    print("\nsummary:", results)
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
