"""The memory plan (`beacon.train.core.memory`) against what a training step holds, on CPU.

Two checks per model, each in a fresh process (its memory is its own):

1. Activations, per decoder layer and token: bytes of the distinct tensors autograd saves for
   backward inside each decoder layer (a `saved_tensors_hooks` pair around every layer's
   forward; parameters left out, a storage counted once), on a padded text batch, float32 and
   bf16 autocast (what accelerate's `mixed_precision: bf16` runs on CPU), against
   `layer_activation_bytes`.
2. A whole step: peak RSS (`ru_maxrss`) of a process that loads the model (float32, as
   `beacon.train.core.setup.load_model` does), builds AdamW, and runs forward, the SFT loss
   (`summed_token_nll`), backward and the optimizer step, minus its RSS before the model was
   loaded, against the plan's parameters + gradients + optimizer + activations + logits. glibc
   keeps freed memory unless told otherwise, so the child runs with MALLOC_MMAP_THRESHOLD_=65536
   (large tensors are mapped and returned when freed, and RSS follows the live tensors).

Models: the built-in tiny Qwen2-VL and `gpu_real_size.py`'s CPU stand-ins (Qwen2.5-VL layers at
hidden 256 / 384, the tiny tokenizer's vocabulary), text only (no image tokens, so the plan's
vision share is left out of the comparison).

    python benchmarks/memory_plan_check.py                  # all models, ~3.5 min on 2 cores
    python benchmarks/memory_plan_check.py --models tiny --tokens 1024
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

MIB = 1 << 20


def batch(vocab: int, rows: int, length: int) -> dict[str, Any]:
    """A text batch of `rows` x `length` random ids; the last row ends in 16 pads, so the
    attention takes the masked path a bucketed training batch takes."""
    import torch

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(10, vocab - 10, (rows, length), generator=generator)
    mask = torch.ones_like(ids)
    mask[-1, -16:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def saved_per_layer(model: Any, inputs: dict[str, Any], bf16: bool) -> list[int]:
    """Bytes of the distinct non-parameter tensors autograd saves inside each decoder layer."""
    import contextlib

    import torch

    layers = model.model.language_model.layers
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: set[int] = set()
    per_layer = [0] * len(layers)
    active: list[contextlib.ExitStack] = []

    def pack(index: int) -> Any:
        def hook(t: torch.Tensor) -> torch.Tensor:
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key not in params and key not in seen:
                seen.add(key)
                per_layer[index] += storage.nbytes()
            return t

        return hook

    def enter(index: int) -> Any:
        def pre(*_: Any, **__: Any) -> None:
            stack = contextlib.ExitStack()
            stack.enter_context(torch.autograd.graph.saved_tensors_hooks(pack(index), lambda t: t))
            active.append(stack)

        return pre

    handles = []
    for i, layer in enumerate(layers):
        handles.append(layer.register_forward_pre_hook(enter(i)))
        handles.append(layer.register_forward_hook(lambda *_: active.pop().close()))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)
    with autocast:
        model(**inputs)
    for handle in handles:
        handle.remove()
    return per_layer


def measure(job: dict) -> dict:
    """One check in this (fresh) process: `layers` counts each decoder layer's saved bytes in
    float32 and bf16 autocast; `step` gives the peak RSS of the second of two SFT steps
    (forward, loss, backward, AdamW step, gradients set to None), the first one holding no
    optimizer state yet, over the RSS after a warm-up step on the tiny model (the libraries'
    first use) and before the model is loaded."""
    import gc

    from beacon.engines.tiny import cached_tiny_model
    from beacon.train.core.config import ModelConfig, TrainConfig
    from beacon.train.core.loss import summed_token_nll
    from beacon.train.core.setup import build_optimizer, load_model

    def load(path: str) -> tuple[Any, Any]:
        model = load_model(ModelConfig(path=path, gradient_checkpointing=job["checkpointing"]))
        return model.train(), build_optimizer(model, TrainConfig(output_dir="-", max_steps=2))[0]

    if job["check"] == "layers":
        model, _ = load(job["path"])
        inputs = batch(model.config.get_text_config().vocab_size, job["rows"], job["length"])
        # the last layer: the first also holds the tensors every layer shares
        return {k: saved_per_layer(model, inputs, k == "bf16")[-1] for k in ("fp32", "bf16")}
    start = 0
    runs = [(str(cached_tiny_model("qwen2_vl")), 1, 32), (job["path"], job["rows"], job["length"])]
    for path, rows, length in runs:  # the tiny model's run is the warm-up
        gc.collect()
        start = _rss()
        model, optimizer = load(path)
        inputs = batch(model.config.get_text_config().vocab_size, rows, length)
        labels = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)
        for _ in range(2):
            logits = model(**inputs).logits  # held through backward, as loop.forward_backward
            summed_token_nll(logits, labels).backward()
            del logits
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        del model, optimizer
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"peak_delta": peak - start}


def _rss() -> int:
    """This process's resident bytes now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def predicted(path: str, rows: int, length: int, checkpointing: bool) -> dict[str, int]:
    """The plan's rows for this model and micro-batch, float32 on one CPU process, every weight
    trained (vision tower included) and no image token in the batch."""
    from beacon.train.core.config import ModelConfig
    from beacon.train.core.memory import (
        Launch,
        Workload,
        layer_activation_bytes,
        model_shape,
        plan_memory,
    )

    cfg = ModelConfig(path=path, gradient_checkpointing=checkpointing, freeze_vision=True)
    shape = model_shape(path, ModelConfig(path=path))  # trainable: all
    launch = Launch(1, "none", False, False, 1 << 40)
    tokens = rows * length
    plan = plan_memory(shape, cfg, launch, Workload(tokens, length, tokens))  # vision: no tokens
    return plan.rows | {
        "layer_fp32": layer_activation_bytes(shape, length, bf16=False),
        "layer_bf16": layer_activation_bytes(shape, length, bf16=True),
    }


def model_path(name: str, root: Path) -> str:
    """The tiny model's folder, or a CPU stand-in of `gpu_real_size.SHAPES` built into `root`."""
    from beacon.engines.tiny import cached_tiny_model

    if name == "tiny":
        return str(cached_tiny_model("qwen2_vl"))
    import gpu_real_size

    out = root / name
    gpu_real_size.build_job({"shape": name, "device": "cpu", "out": str(out)})
    return str(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "small", "small-wide"])
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(json.loads(args.child))))
        return
    tokens = args.rows * args.length
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "2"}
    print(f"# memory_plan_check: {args.rows} rows x {args.length} tokens, CPU, MiB")
    print("model | ckpt | layer/token fp32 pred / meas | bf16 pred / meas | step pred / meas")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            path = model_path(name, Path(tmp))
            for checkpointing in (False, True):
                job = {"path": path, "rows": args.rows, "length": args.length}
                job["checkpointing"] = checkpointing
                got = {}
                for check in ("layers", "step") if not checkpointing else ("step",):
                    cmd = [sys.executable, __file__, "--child", json.dumps(job | {"check": check})]
                    run = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
                    got |= json.loads(run.stdout.strip().splitlines()[-1])
                plan = predicted(path, args.rows, args.length, checkpointing)
                step = sum(v for k, v in plan.items() if not k.startswith("layer"))
                layer = (
                    f"{plan['layer_fp32']} / {got['fp32'] / tokens:.0f} | "
                    f"{plan['layer_bf16']} / {got['bf16'] / tokens:.0f}"
                    if "fp32" in got
                    else "- | -"
                )
                print(
                    f"{name} | {checkpointing} | {layer} | {step / MIB:.0f} / "
                    f"{got['peak_delta'] / MIB:.0f} ({got['peak_delta'] / step:.2f}x)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
