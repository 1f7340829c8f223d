"""Eval throughput: the same `synth` run against `beacon serve` with concurrency 1 vs N.

Serves the tiny model over HTTP in this process (`beacon serve`'s app, which batches
concurrent requests), then runs `beacon eval --engine openai` at each concurrency and prints
episodes per second and the speed-up over concurrency 1. A benchmark, not a test.

    python benchmarks/eval_throughput.py --limit 16 --concurrency 1 4 16
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import tempfile
import time
from pathlib import Path

from beacon.agent.config import AgentConfig
from beacon.engines.hf import HFEngine
from beacon.engines.serve import serving
from beacon.engines.tiny import cached_tiny_model
from beacon.eval.config import EngineConfig, EvalConfig
from beacon.eval.runner import run_eval


def measure(base_url: str, model: Path, limit: int, concurrency: int, tokens: int) -> float:
    """Seconds for one complete eval run (tool + notool) at `concurrency`."""
    with tempfile.TemporaryDirectory() as out:
        cfg = EvalConfig(
            engine=EngineConfig(
                name="openai",
                model="beacon",
                base_url=base_url,
                tokenizer=str(model),
                concurrency=concurrency,
            ),
            agent=AgentConfig(max_new_tokens_per_turn=tokens, max_total_new_tokens=2 * tokens),
            benchmarks=["synth"],
            limit=limit,
            concurrency=concurrency,
            out=out,
            bootstrap=0,
            report=False,
        )
        start = time.perf_counter()
        run_eval(cfg, progress=False)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=16, help="synth items (x2 modes)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--tokens", type=int, default=32, help="max new tokens per turn")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    model = cached_tiny_model("qwen2_vl")
    engine = HFEngine(model, batch_size=max(args.concurrency))
    episodes = args.limit * 2
    rows = []
    with serving(engine) as base_url:
        measure(base_url, model, 2, 2, args.tokens)  # warm-up: imports, sandbox start
        for concurrency in args.concurrency:
            seconds = measure(base_url, model, args.limit, concurrency, args.tokens)
            rows.append((concurrency, seconds, episodes / seconds))
    base = rows[0][2]
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}")
    print(
        f"synth x {args.limit} items x 2 modes = {episodes} episodes, tiny Qwen2-VL, "
        f"{args.tokens} new tokens/turn, served by beacon serve (hf engine, CPU)"
    )
    print(f"{'concurrency':>11} | {'seconds':>8} | {'episodes/s':>10} | {'speed-up':>8}")
    print("-" * 47)
    for concurrency, seconds, rate in rows:
        print(f"{concurrency:>11} | {seconds:>8.2f} | {rate:>10.2f} | {rate / base:>7.2f}x")


if __name__ == "__main__":
    main()
