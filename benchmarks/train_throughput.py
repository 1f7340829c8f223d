"""SFT throughput: length-bucketed micro-batches vs naive padding, same global batch, same loss.

Builds a small random Qwen2-VL (or uses --model), writes a mixed-length set of multi-turn
Thyme-format trajectories (0-4 tool calls, each with a crop image, reasoning of varying
length), and trains with the real SFT recipe (`beacon.train.sft.recipe.build_parts`, the loop's
`forward_backward` + `optimizer_step`) once with `train.batching=pad` (micro-batches of
--micro-batch rows in data order, each padded to its longest row) and once with
`train.batching=bucket` at a padded-token budget no larger than the naive run's largest
micro-batch, so its peak memory is not higher. Each mode runs in its own process (peak RSS,
or peak CUDA memory on a GPU, is per mode); modes alternate for --repeats rounds.

Reported: real (non-padding) tokens per second over the timed steps, the share of padding,
peak memory, and the first step's loss (identical weights and batch, so it must match). A
benchmark, not a test.

    python benchmarks/train_throughput.py --steps 4 --repeats 2
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import platform
import random
import resource
import tempfile
import time
from pathlib import Path
from typing import Any


def write_trajectories(model: Path, out: Path, count: int, seed: int) -> Path:
    """`count` scripted trajectories of mixed length into out/trajs.jsonl (+ images)."""
    from beacon.engines.tokenizer import HFTokenizer
    from beacon.fakes.trajectories import scripted_trajectory
    from beacon.images import ImageStore

    tokenizer = HFTokenizer.from_pretrained(model)
    store = ImageStore(out / "images")
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        calls = rng.choice([0, 0, 1, 1, 2, 3, 4])
        filler = rng.choice([0, 5, 20, 60, 150])
        traj = scripted_trajectory(tokenizer, store, i, tool_calls=calls, filler_words=filler)
        lines.append(traj.to_json())
    path = out / "trajs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def run_mode(args: dict[str, Any]) -> dict[str, Any]:
    """Train `steps` steps on the same global batch in one batching mode (own process)."""
    import torch

    from beacon.train.core.setup import make_accelerator
    from beacon.train.core.train_loop import (
        forward_backward,
        my_share,
        optimizer_step,
        step_indices,
    )
    from beacon.train.sft import SFTConfig
    from beacon.train.sft.recipe import build_parts, make_plan

    torch.set_num_threads(args["threads"])
    cfg = SFTConfig.model_validate(args["config"])
    accelerator = make_accelerator(cfg.model, cfg.train)
    parts, data = build_parts(cfg, accelerator)
    parts.model.train()  # as the loop does: transformers checkpoints gradients only in training
    indices = step_indices(0, cfg.train.global_batch_size, len(data.rows), cfg.train.seed)
    plan = make_plan(data, cfg)
    losses, seconds, tokens, padded = [], 0.0, 0, 0
    cuda = torch.cuda.is_available()
    for step in range(args["steps"] + 1):  # step 0 warms up and is not timed
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        batches = plan(my_share(indices, accelerator))
        result = forward_backward(accelerator, parts.model, batches)
        optimizer_step(parts, cfg.train.max_grad_norm)
        if cuda:
            torch.cuda.synchronize()
        losses.append(result.loss)
        if step > 0:
            seconds += time.perf_counter() - start
            tokens += result.tokens
            padded += result.padded_tokens
    peak = (
        torch.cuda.max_memory_allocated() / 2**20
        if cuda
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    )
    return {
        "tokens_per_s": tokens / seconds,
        "padding": 1 - tokens / padded,
        "peak_mib": peak,
        "first_loss": losses[0],
        "microbatches": len(batches),
        "max_len": max(len(data.rows[i]) for i in indices),
    }


def config(
    model: Path, data: Path, out: Path, mode: str, batch: int, micro: int, budget: int
) -> dict:
    return {
        "model": {"path": str(model), "mixed_precision": "auto"},
        "data": {"train": [str(data)], "images": str(data.parent / "images"), "max_length": 8192},
        "train": {
            "output_dir": str(out / mode),
            "max_steps": 1000,
            "global_batch_size": batch,
            "batching": mode,
            "micro_batch_size": micro,
            "max_tokens_per_microbatch": budget,
            "lr": 1e-4,
            "progress_bar": False,
        },
    }


def build_model(out: Path, size: str) -> Path:
    from beacon.engines.tiny import TinyModelSpec, cached_tiny_model, make_tiny_model

    if size == "tiny":
        return cached_tiny_model("qwen2_vl")
    spec = TinyModelSpec(hidden_size=256, intermediate_size=1024, num_layers=4, num_heads=4)
    return make_tiny_model(out / "model", "qwen2_vl", spec=spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", type=Path, help="checkpoint folder (default: a small random one)"
    )
    parser.add_argument("--size", choices=["tiny", "small"], default="small")
    parser.add_argument("--batch", type=int, default=32, help="trajectories per step")
    parser.add_argument(
        "--micro-batch", type=int, default=8, help="naive mode rows per micro-batch"
    )
    parser.add_argument("--steps", type=int, default=3, help="timed steps per run")
    parser.add_argument("--repeats", type=int, default=2, help="alternating rounds of both modes")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        model = args.model or build_model(out, args.size)
        data = write_trajectories(model, out / "data", args.batch, seed=0)
        probe = config(model, data, out, "pad", args.batch, args.micro_batch, 1)
        naive_peak = naive_peak_tokens(probe)
        ctx = mp.get_context("spawn")
        results: dict[str, list[dict]] = {"pad": [], "bucket": []}
        with ctx.Pool(1, maxtasksperchild=1) as pool:
            for _ in range(args.repeats):
                for mode in ("pad", "bucket"):
                    cfg = config(model, data, out, mode, args.batch, args.micro_batch, naive_peak)
                    job = {"config": cfg, "steps": args.steps, "threads": args.threads}
                    results[mode].append(pool.apply(run_mode, (job,)))
    _print_table(results, args, naive_peak)


def naive_peak_tokens(cfg: dict) -> int:
    """The naive mode's largest micro-batch in padded tokens: the bucket budget."""
    from beacon.engines.tokenizer import HFTokenizer
    from beacon.train.core.train_loop import step_indices
    from beacon.train.sft import SFTConfig
    from beacon.train.sft.recipe import build_data

    sft = SFTConfig.model_validate(cfg)
    tokenizer = HFTokenizer.from_pretrained(sft.model.path)
    rows = build_data(sft, tokenizer, tokenizer.processor).rows
    order = step_indices(0, sft.train.global_batch_size, len(rows), sft.train.seed)
    lengths = [len(rows[i]) for i in order]
    micro = sft.train.micro_batch_size
    return max(
        len(lengths[s : s + micro]) * max(lengths[s : s + micro])
        for s in range(0, len(lengths), micro)
    )


def _print_table(results: dict[str, list[dict]], args: argparse.Namespace, budget: int) -> None:
    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor()
    print(
        f"\nSFT throughput, {args.batch} trajectories/step, "
        f"{args.steps} timed steps x {args.repeats} rounds"
    )
    print(
        f"machine: {platform.node()} {device or platform.machine()}, torch threads {args.threads}"
    )
    print(
        f"naive: micro-batches of {args.micro_batch} rows; bucket: <= {budget} padded tokens each\n"
    )
    print("| mode   | round | tokens/s | padding | peak MiB | micro-batches | step-1 loss |")
    print("|--------|-------|----------|---------|----------|---------------|-------------|")
    for mode, runs in results.items():
        for i, r in enumerate(runs):
            print(
                f"| {mode:6} | {i + 1:5} | {r['tokens_per_s']:8.0f} | {r['padding']:7.1%} | "
                f"{r['peak_mib']:8.0f} | {r['microbatches']:13} | {r['first_loss']:.6f} |"
            )
    best = {mode: max(r["tokens_per_s"] for r in runs) for mode, runs in results.items()}
    loss_gap = max(
        abs(a["first_loss"] - b["first_loss"]) for a, b in zip(*results.values(), strict=True)
    )
    print(f"\nbucket / pad tokens/s (best of rounds): {best['bucket'] / best['pad']:.2f}x")
    print(f"largest step-1 loss difference: {loss_gap:.2e}")


if __name__ == "__main__":
    main()
