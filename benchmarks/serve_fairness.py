"""`beacon serve` fairness: how long a short request waits beside a long one.

A long request (4000 new tokens) is sent to a `beacon serve` of the tiny model; once its
generation has started, a short one (2 new tokens) is sent. Measured: the short request's
latency, the long one's, the short one alone on an idle server, and the process CPU time the
pair cost (on a shared machine wall time also counts other users' load; CPU time is the cost).
Baseline is the server running each request whole (`--chunk-tokens 0`, how the server ran
before issue 40); the candidates run long requests in chunks (`beacon.engines.sharing`), which
makes the short one wait about one chunk and costs the long one a fresh prefill per chunk.
End-of-sequence is masked, so the long request always runs to its length. A benchmark, not a
test.

    python benchmarks/serve_fairness.py --long 4000 --chunks 0 64 128 256 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import threading
import time

import httpx
import torch

from beacon.engines.hf import HFEngine
from beacon.engines.serve import serve_in_thread
from beacon.engines.serve_guard import ServeSettings
from beacon.engines.tiny import cached_tiny_model
from beacon.fakes.logits import NoEndOfSequence


def timed_chat(base_url: str, text: str, max_tokens: int) -> float:
    """Seconds one request took; raises if it did not produce `max_tokens` tokens."""
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens}
    start = time.perf_counter()
    reply = httpx.post(f"{base_url}/chat/completions", json=body, timeout=3600)
    elapsed = time.perf_counter() - start
    reply.raise_for_status()
    if reply.json()["usage"]["completion_tokens"] != max_tokens:
        raise RuntimeError(f"expected {max_tokens} tokens: {reply.text[:300]}")
    return elapsed


def measure(engine: HFEngine, counter: NoEndOfSequence, chunk: int, long: int) -> dict:
    """Latencies of the short request alone, then of a long and a short one together."""
    handle = serve_in_thread(engine, "tiny", settings=ServeSettings(chunk_tokens=chunk))
    try:
        alone = timed_chat(handle.base_url, "short", 2)
        times: dict[str, float] = {}
        runner = threading.Thread(
            target=lambda: times.update(long=timed_chat(handle.base_url, "long", long))
        )
        counter.steps = 0
        cpu = time.process_time()
        runner.start()
        while counter.steps == 0:
            time.sleep(0.005)
        times["short"] = timed_chat(handle.base_url, "short", 2)
        runner.join()
        times["cpu"] = time.process_time() - cpu
    finally:
        handle.stop()
    return {"alone": alone, **times}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--long", type=int, default=4000, help="new tokens of the long request")
    parser.add_argument("--chunks", type=int, nargs="+", default=[0, 64, 128, 256])
    parser.add_argument("--rounds", type=int, default=3, help="rounds; medians are printed")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    engine = HFEngine(cached_tiny_model("qwen2_vl"), batch_size=8)
    counter = NoEndOfSequence(engine.tokenizer.eos_token_ids)
    engine.logits_processors = [counter]
    load = os.getloadavg()[0]
    runs: dict[int, list[dict]] = {chunk: [] for chunk in args.chunks}
    for _ in range(args.rounds):  # settings alternate, so a busy minute hits them all
        for chunk in args.chunks:
            runs[chunk].append(measure(engine, counter, chunk, args.long))
    engine.close()
    rows = {
        chunk: {key: statistics.median(run[key] for run in found) for key in found[0]}
        for chunk, found in runs.items()
    }

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs (load {load:.1f} at start), "
        f"{args.threads} torch thread(s), Python {platform.python_version()}, torch "
        f"{torch.__version__}; tiny qwen2_vl, long request {args.long} tokens, short request "
        f"2 tokens; medians of {args.rounds} rounds\n"
    )
    base = rows[args.chunks[0]]
    print("| --chunk-tokens | short alone | short beside long | long | CPU of both "
          "| short vs baseline | CPU vs baseline |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for chunk, row in rows.items():
        name = f"{chunk} (whole, baseline)" if chunk == 0 else str(chunk)
        print(
            f"| {name} | {row['alone']:.2f} s | {row['short']:.2f} s | {row['long']:.1f} s "
            f"| {row['cpu']:.1f} s | {row['short'] / base['short']:.3f}x "
            f"| {row['cpu'] / base['cpu']:.2f}x |"
        )


if __name__ == "__main__":
    main()
