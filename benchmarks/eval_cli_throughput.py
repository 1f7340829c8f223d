"""`beacon eval` CLI throughput against a model-free OpenAI-compatible server (a benchmark).

The server (`eval_throughput.py --serve-fake`, its own process) answers each turn after 250 ms
with next to no CPU: turn 1 writes a crop, turn 2 answers, so an episode is two turns and one
sandbox call on a 1024x768 synth image. Each row runs the real CLI twice, with n and 2n
episodes, and reports the difference divided by n, so start-up and the end-of-run summary cancel:
wall time per episode, the speed-up over concurrency 1 (ideal: the concurrency itself), and the
CPU per episode of the `beacon eval` process with its sandbox (its reaped children).

The baseline column runs the same command with `engine.concurrency=16`, the openai engine's
fixed request limit before `beacon eval` raised it to its episodes in flight:

    python benchmarks/eval_cli_throughput.py --concurrency 1 16 64
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import tempfile
import time
from pathlib import Path

from beacon.jsonl import read_jsonl
from eval_throughput import start_fake  # this folder: the same fake server

BASELINE = ["--set", "engine.concurrency=16"]


def run_cli(base_url: str, concurrency: int, episodes: int, extra: list[str]) -> tuple[float, ...]:
    """One `beacon eval` run: its wall seconds and the CPU seconds of it and its children."""
    with tempfile.TemporaryDirectory(prefix="beacon-cli-") as out:
        cmd = [
            "beacon", "eval", "--engine", "openai", "--base-url", base_url, "--model", "beacon",
            "--bench", "synth", "--modes", "tool", "--limit", str(episodes),
            "--concurrency", str(concurrency), "--out", out, "--no-progress",
            "--set", "agent.max_new_tokens_per_turn=256",
            "--set", "agent.max_total_new_tokens=1024", "--set", "report=false", *extra,
        ]  # fmt: skip
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"beacon eval failed:\n{done.stderr[-3000:]}")
        rows = list(read_jsonl(Path(out) / "samples.jsonl", whole=True))
        if len(rows) != episodes or any(r["error"] for r in rows):
            failed = sum(bool(r["error"]) for r in rows)
            raise SystemExit(f"{failed} of {len(rows)} episodes failed or missing")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def per_episode(base_url: str, concurrency: int, n: int, extra: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds per episode from runs of n and 2n episodes."""
    wall_n, cpu_n = run_cli(base_url, concurrency, n, extra)
    wall_2n, cpu_2n = run_cli(base_url, concurrency, 2 * n, extra)
    return (wall_2n - wall_n) / n, (cpu_2n - cpu_n) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--latency", type=float, default=0.25, help="server seconds per turn")
    parser.add_argument("--rounds", type=int, default=4, help="n = rounds x concurrency")
    parser.add_argument("--min-episodes", type=int, default=32)
    args = parser.parse_args()
    server, base_url = start_fake(args.latency)
    try:
        print(f"beacon eval CLI, {args.latency * 1000:.0f} ms per turn, two turns per episode")
        print("| in flight | episodes n | ms/episode | speed-up | CPU ms/episode "
              "| baseline ms/episode | baseline speed-up | ratio |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|")
        first: dict[str, float] = {}
        for c in args.concurrency:
            n = max(args.min_episodes, args.rounds * c)
            wall, cpu = per_episode(base_url, c, n, [])
            base_wall, _ = per_episode(base_url, c, n, BASELINE)
            first.setdefault("now", wall)
            first.setdefault("base", base_wall)
            print(
                f"| {c} | {n} | {wall * 1000:.1f} | {first['now'] / wall:.1f}x | {cpu * 1000:.1f} "
                f"| {base_wall * 1000:.1f} | {first['base'] / base_wall:.1f}x "
                f"| {base_wall / wall:.2f}x |",
                flush=True,
            )
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
