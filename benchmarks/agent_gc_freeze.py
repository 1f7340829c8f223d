"""The agent loop's heap freeze (`AgentConfig.freeze_heap`) on and off, on its two paths.

While episodes stream, the loop keeps what was alive when they started (modules, tokenizer,
engine, model) out of full garbage collections (`gc.freeze`). This times `AgentLoop.stream`
with the switch on and off in alternating rounds in one process (both see the same load):

    eval  `beacon eval`'s path: the openai engine against `eval_throughput.py`'s fake server
          (its own process, `--latency` per turn, the tiny model's tokenizer for token ids),
          tool episodes on the synth benchmark (a crop in the sandbox, then the answer)
    tiny  a rollout's path: the tiny Qwen2-VL in-process (hf engine, CPU), notool episodes of
          `--new-tokens` tokens

`--episodes` per round, `--concurrency` in flight. Per round: wall ms per episode, the ms the
collector ran per episode (every generation, timed with `gc.callbacks`) and the number of full
collections; the table gives the medians of the rounds (per episode, and the collector's per
stream), their difference and ratio. Full collections are rare (the heap of modules, tokenizer
and engine is large), so a round needs hundreds of episodes to see one. A benchmark, not a test.

    nice -n 5 python benchmarks/agent_gc_freeze.py [--rounds 5] [--episodes 512] [--paths eval]
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from PIL import Image

from beacon.agent.config import AgentConfig
from beacon.agent.episode import EpisodeSpec
from beacon.agent.loop import AgentLoop
from beacon.benchmarks import get_benchmark
from beacon.engines.base import Engine
from beacon.engines.hf import HFEngine
from beacon.engines.openai import OpenAIEngine
from beacon.engines.tiny import cached_tiny_model
from beacon.engines.tokenizer import HFTokenizer
from beacon.images import ImageStore
from beacon.sandbox import Sandbox
from beacon.types import Sample

sys.path.insert(0, str(Path(__file__).parent))
from eval_throughput import start_fake  # the fake server, a sibling script

Round = Callable[[bool, int], tuple[float, float, int]]


class CollectorClock:
    """Seconds spent in garbage collections, and full collections, while installed."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self.full = 0
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.total_s += time.perf_counter() - self._start
            self.full += info["generation"] == 2

    def __enter__(self) -> CollectorClock:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def timed_stream(
    engine: Engine,
    sandbox: Sandbox | None,
    store: ImageStore | None,
    config: AgentConfig,
    specs: list[EpisodeSpec],
    concurrency: int,
) -> tuple[float, float, int]:
    """(wall ms per episode, collector ms per episode, full collections) of one stream."""
    with AgentLoop(engine, sandbox, config, store=store) as loop, CollectorClock() as clock:
        start = time.perf_counter()
        done = sum(1 for _ in loop.stream(specs, max_active=concurrency))
        wall = time.perf_counter() - start
    return wall / done * 1e3, clock.total_s / done * 1e3, clock.full


def tiny_samples(n: int, seed: int) -> list[Sample]:
    """`n` samples with a 64x64 image each, each image its own object (as a benchmark's)."""
    return [
        Sample(
            id=f"s{seed}-{i}",
            images=[Image.new("RGB", (64, 64), (i % 256, seed % 256, 90))],
            question=f"Which colour is image {i}? (A) red (B) blue",
            answer="A",
        )
        for i in range(n)
    ]


def measure(one_round: Round, rounds: int) -> dict[bool, list[tuple[float, float, int]]]:
    """`rounds` alternating rounds of on and off, after a warm-up round."""
    one_round(True, 0)
    times: dict[bool, list[tuple[float, float, int]]] = {True: [], False: []}
    for n in range(rounds):
        for freeze in (True, False):
            times[freeze].append(one_round(freeze, 1 + 2 * n + (not freeze)))
    return times


def eval_path(args: argparse.Namespace) -> dict[bool, list[tuple[float, float, int]]]:
    tokenizer_path = cached_tiny_model("qwen2_vl")
    server, base_url = start_fake(args.latency_ms / 1000, str(tokenizer_path))
    synth = get_benchmark("synth")
    try:
        engine = OpenAIEngine(
            base_url=base_url,
            model="beacon",
            tokenizer=HFTokenizer.from_pretrained(tokenizer_path),
            concurrency=args.concurrency,
        )
        with tempfile.TemporaryDirectory() as out, Sandbox() as sandbox:
            store = ImageStore(Path(out) / "images")

            def one_round(freeze: bool, seed: int) -> tuple[float, float, int]:
                config = AgentConfig(
                    max_new_tokens_per_turn=256, max_total_new_tokens=1024, freeze_heap=freeze
                )
                samples = synth.load(limit=args.episodes if seed else 4, seed=seed)
                specs = [EpisodeSpec(sample, mode="tool") for sample in samples]
                return timed_stream(engine, sandbox, store, config, specs, args.concurrency)

            times = measure(one_round, args.rounds)
        engine.close()
        return times
    finally:
        server.terminate()
        server.wait()


def tiny_path(args: argparse.Namespace) -> dict[bool, list[tuple[float, float, int]]]:
    engine = HFEngine(cached_tiny_model("qwen2_vl"), batch_size=16)

    def one_round(freeze: bool, seed: int) -> tuple[float, float, int]:
        config = AgentConfig(
            max_turns=1, max_new_tokens_per_turn=args.new_tokens, freeze_heap=freeze
        )
        samples = tiny_samples(args.episodes if seed else 4, seed)
        specs = [EpisodeSpec(sample, mode="notool") for sample in samples]
        return timed_stream(engine, None, None, config, specs, args.concurrency)

    return measure(one_round, args.rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", nargs="+", default=["eval", "tiny"], choices=["eval", "tiny"])
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of on and off")
    parser.add_argument("--episodes", type=int, default=512, help="episodes per round")
    parser.add_argument("--concurrency", type=int, default=64, help="episodes in flight")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="eval: the server's turn")
    parser.add_argument("--new-tokens", type=int, default=8, help="tiny: tokens per episode")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = {path: {"eval": eval_path, "tiny": tiny_path}[path](args) for path in args.paths}
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
        f"torch {torch.__version__}, {args.threads} threads, Python {platform.python_version()}"
    )
    print(
        f"{args.episodes} episodes per round, {args.concurrency} in flight; eval: tool episodes, "
        f"{args.latency_ms:g} ms per turn; tiny: notool, {args.new_tokens} new tokens; medians "
        f"of {args.rounds} alternating rounds\n"
    )
    print("| path | per episode | freeze_heap on | off | off - on | off / on |")
    print("|---|---|---|---|---|---|")
    rows = (
        ("wall ms", 0, 1),
        ("collector ms", 1, 1),
        ("full collections", 2, 1),
        (f"collector ms per stream of {args.episodes}", 1, args.episodes),
    )
    for path, times in results.items():
        for name, column, scale in rows:
            on = statistics.median(t[column] for t in times[True]) * scale
            off = statistics.median(t[column] for t in times[False]) * scale
            ratio = f"{off / on:.2f}x" if on else "-"
            print(f"| {path} | {name} | {on:.2f} | {off:.2f} | {off - on:+.2f} | {ratio} |")


if __name__ == "__main__":
    main()
