"""Eval throughput of the agent loop, in two settings. A benchmark, not a test.

1. `fake`: a model-free OpenAI-compatible server (real HTTP, in its own process) answers every
   turn after a fixed latency (250 ms): turn 1 writes a crop in Thyme's format, turn 2 answers.
   So an episode is two turns and one sandbox call, and everything above 2 x latency is the
   harness (request building, image encoding, tokenizing, the sandbox, waiting on other
   episodes). Reports harness time per episode at concurrency 1 and the speed-up over
   concurrency 1 at 4/16/64 (ideal: the concurrency itself).
2. `tiny`: the synth benchmark (tool + notool) on the tiny Qwen2-VL served by `beacon serve`
   (hf engine, CPU), with the same openai client: episodes per second and speed-up.

Both drive `AgentLoop` directly (engine, sandbox, image store, as `beacon eval` does) with the
synth samples (1024x768 images), and use only APIs the loop had before its async rewrite, so the
same script measures an older checkout for a side-by-side table:

    python benchmarks/eval_throughput.py --concurrency 1 4 16 64
    PYTHONPATH=/tmp/agent-base/src python benchmarks/eval_throughput.py  # a baseline checkout
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from beacon.agent.config import AgentConfig
from beacon.agent.episode import EpisodeSpec
from beacon.agent.loop import AgentLoop
from beacon.benchmarks import get_benchmark
from beacon.engines.openai import OpenAIEngine
from beacon.engines.tiny import cached_tiny_model
from beacon.images import ImageStore
from beacon.sandbox import Sandbox
from beacon.types import Sample

CODE_TURN = (
    "Let me zoom in. <code>\n```python\nw, h = image.size\n"
    "image.crop((0, 0, w // 2, h // 2)).show()\n```\n</code>"
)
ANSWER_TURN = "The crop shows it. <answer>A</answer>"


# ------------------------------------------------------------------ fake server (own process)
def fake_app(latency_s: float, token_ids: dict[str, list[int]]) -> object:
    """A raw ASGI app: POST /v1/chat/completions answers the scripted turn after `latency_s`.

    The turn is read off the request: a context that already holds a sandbox output gets the
    answer, any other the code. Token ids (when given) are the turn's ids, stop string included,
    as vLLM returns them with `return_token_ids`.
    """

    async def app(scope: dict, receive: object, send: object) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = json.loads(b"".join(chunks))
        answered = "<sandbox_output>" in json.dumps(body["messages"][-1])
        text, stop = (ANSWER_TURN, "</answer>") if answered else (CODE_TURN, "</code>")
        await asyncio.sleep(latency_s)
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text[: -len(stop)]},
            "finish_reason": "stop",
            "stop_reason": stop,
        }
        if token_ids and body.get("return_token_ids"):
            choice["token_ids"] = token_ids[text]
        reply = json.dumps({"choices": [choice]}).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": reply})

    return app


def serve_fake(latency_s: float, tokenizer: str | None) -> None:
    """Entry point of the server process: prints its port, then serves until killed."""
    import socket

    import uvicorn

    token_ids: dict[str, list[int]] = {}
    if tokenizer:
        from beacon.engines.tokenizer import HFTokenizer

        tok = HFTokenizer.from_pretrained(tokenizer)
        token_ids = {t: tok.encode(t) for t in (CODE_TURN, ANSWER_TURN)}
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(fake_app(latency_s, token_ids), log_level="warning", lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


@dataclass
class Row:
    concurrency: int
    episodes: int
    seconds: float
    errors: int  # episodes that ended in engine_error / sandbox_error (a row with many is void)

    @property
    def per_episode_s(self) -> float:
        return self.seconds / self.episodes


def run_episodes(
    base_url: str, tokenizer: object, specs: list[EpisodeSpec], concurrency: int, agent: object
) -> tuple[float, int]:
    """Seconds to run `specs` through one AgentLoop at `concurrency`, and the error count."""
    engine = OpenAIEngine(
        base_url=base_url, model="beacon", tokenizer=tokenizer, concurrency=concurrency
    )
    with tempfile.TemporaryDirectory() as out, Sandbox() as sandbox:
        with AgentLoop(engine, sandbox, agent, store=ImageStore(Path(out) / "images")) as loop:
            loop.run(specs[:2], max_active=2)  # warm-up: sandbox workers, connections
            start = time.perf_counter()
            trajectories = loop.run(specs, max_active=concurrency)
            seconds = time.perf_counter() - start
        engine.close()
    errors = [t for t in trajectories if t.finish_reason.endswith("_error")]
    if errors:
        logging.warning("%d episodes failed, e.g.: %s", len(errors), errors[0].error)
    return seconds, len(errors)


def fake_rows(args: argparse.Namespace, tokenizer: object, samples: list[Sample]) -> list[Row]:
    tok_path = str(cached_tiny_model("qwen2_vl")) if tokenizer is not None else ""
    cmd = [sys.executable, __file__, "--serve-fake", str(args.latency), "--tokenizer", tok_path]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        base_url = f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"
        _wait_for(base_url)
        rows = []
        agent = AgentConfig(max_new_tokens_per_turn=256, max_total_new_tokens=1024)
        for concurrency in args.concurrency:
            n = max(args.min_episodes, args.rounds * concurrency)
            specs = [EpisodeSpec(samples[i % len(samples)], mode="tool") for i in range(n)]
            rows.append(
                Row(concurrency, n, *run_episodes(base_url, tokenizer, specs, concurrency, agent))
            )
        return rows
    finally:
        server.terminate()
        server.wait()


def tiny_rows(args: argparse.Namespace, samples: list[Sample]) -> list[Row]:
    from beacon.engines.hf import HFEngine
    from beacon.engines.serve import serving

    model = cached_tiny_model("qwen2_vl")
    engine = HFEngine(model, batch_size=max(args.concurrency))
    agent = AgentConfig(max_new_tokens_per_turn=args.tokens, max_total_new_tokens=2 * args.tokens)
    specs = [EpisodeSpec(s, mode=m) for s in samples[: args.limit] for m in ("tool", "notool")]
    rows = []
    with serving(engine) as base_url:
        for concurrency in args.concurrency:
            result = run_episodes(base_url, engine.tokenizer, specs, concurrency, agent)
            rows.append(Row(concurrency, len(specs), *result))
    return rows


def _wait_for(base_url: str) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.post(base_url + "/chat/completions", json={"messages": [{}]}, timeout=5)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError("the fake server did not start")


def print_fake(rows: list[Row], latency_s: float, with_ids: bool) -> None:
    base = rows[0]
    ids = "with token ids (local tokenizer)" if with_ids else "text only"
    print(f"\nfake server: {latency_s * 1000:.0f} ms per turn, 2 turns + 1 crop per episode, {ids}")
    print(f"{'concurrency':>11} | {'episodes':>8} | {'s/episode':>9} | {'harness ms/ep':>13} | "
          f"{'speed-up':>8} | {'errors':>6}")  # fmt: skip
    print("-" * 72)
    for row in rows:
        harness = (row.per_episode_s * row.concurrency - 2 * latency_s) * 1000
        speedup = base.per_episode_s / row.per_episode_s
        print(
            f"{row.concurrency:>11} | {row.episodes:>8} | {row.per_episode_s:>9.4f} | "
            f"{harness:>13.1f} | {speedup:>7.2f}x | {row.errors:>6}"
        )
    print("harness ms/ep = wall time x concurrency / episodes - 2 x latency")


def print_tiny(rows: list[Row], tokens: int) -> None:
    base = rows[0]
    print(
        f"\ntiny Qwen2-VL served by beacon serve (hf engine, CPU), synth, tool + notool, "
        f"{tokens} new tokens/turn"
    )
    print(f"{'concurrency':>11} | {'episodes':>8} | {'seconds':>8} | {'episodes/s':>10} | "
          f"{'speed-up':>8} | {'errors':>6}")  # fmt: skip
    print("-" * 67)
    for row in rows:
        rate = row.episodes / row.seconds
        print(
            f"{row.concurrency:>11} | {row.episodes:>8} | {row.seconds:>8.2f} | {rate:>10.2f} | "
            f"{base.seconds / base.episodes * rate:>7.2f}x | {row.errors:>6}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--latency", type=float, default=0.25, help="fake server s per turn")
    parser.add_argument("--rounds", type=int, default=3, help="fake: episodes = rounds x conc.")
    parser.add_argument("--min-episodes", type=int, default=8, help="fake: at least this many")
    parser.add_argument("--text-only", action="store_true", help="fake: no local tokenizer")
    parser.add_argument("--skip", choices=["fake", "tiny"], nargs="*", default=[])
    parser.add_argument("--limit", type=int, default=16, help="tiny: synth items (x2 modes)")
    parser.add_argument("--tokens", type=int, default=32, help="tiny: max new tokens per turn")
    parser.add_argument("--serve-fake", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--tokenizer", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake is not None:
        serve_fake(args.serve_fake, args.tokenizer or None)
        return
    logging.basicConfig(level=logging.WARNING)
    samples = list(get_benchmark("synth").load(limit=max(args.limit, 16)))
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    import beacon

    print(f"beacon from {Path(beacon.__file__).parent}")
    if "fake" not in args.skip:
        tokenizer = None
        if not args.text_only:
            from beacon.engines.tokenizer import HFTokenizer

            tokenizer = HFTokenizer.from_pretrained(cached_tiny_model("qwen2_vl"))
        print_fake(fake_rows(args, tokenizer, samples), args.latency, tokenizer is not None)
    if "tiny" not in args.skip:
        print_tiny(tiny_rows(args, samples), args.tokens)


if __name__ == "__main__":
    main()
