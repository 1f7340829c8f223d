"""Eval throughput of the agent loop, in two settings. A benchmark, not a test.

1. `fake`: a model-free OpenAI-compatible server (real HTTP, in its own process) answers every
   turn after a fixed latency (250 ms): turn 1 writes a crop in Thyme's format, turn 2 answers.
   So an episode is two turns and one sandbox call, and everything but the time the server
   holds its two requests (the latency, the server's timer overshoot and parsing, which the
   server measures) is the harness (request building, image encoding, tokenizing, the
   sandbox, waiting on other episodes). Reports harness time per episode at concurrency 1
   and the speed-up over concurrency 1 at 4/16/64 (ideal: the concurrency itself). Every
   episode gets its own synth image, so no concurrency profits from an image the store or a
   cache already holds. The server is a separate process, so its own CPU is not harness
   time, though on a small machine it shares the cores (it reports it: CPU ms per episode).
2. `tiny`: the synth benchmark (tool + notool) on the tiny Qwen2-VL served by `beacon serve`
   (hf engine, CPU), with the same openai client: episodes per second and speed-up.

Both drive `AgentLoop` directly (engine, sandbox, image store, as `beacon eval` does) with the
synth samples (1024x768 images), and use only APIs the loop had before its async rewrite, so the
same script measures an older checkout; `--baseline` runs it first, back to back, and prints
both side by side with their ratio:

    python benchmarks/eval_throughput.py --concurrency 1 4 16 64
    git worktree add /tmp/before HEAD
    python benchmarks/eval_throughput.py --skip tiny --baseline /tmp/before/src
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
    as vLLM returns them with `return_token_ids`. `/stats` gives the server's CPU seconds and
    how long it held the chat requests so far, from their arrival to its reply: the latency,
    the overshoot of its timer (~0.7 ms per `asyncio.sleep` here) and its own parsing, none of
    which is harness time.
    """
    held = {"s": 0.0}

    async def app(scope: dict, receive: object, send: object) -> None:
        if scope["type"] != "http":
            return
        if scope["path"].endswith("/stats"):
            reply = json.dumps({"cpu_s": time.process_time(), "held_s": held["s"]}).encode()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": reply})
            return
        arrived = time.perf_counter()
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
        held["s"] += time.perf_counter() - arrived
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
    # IPPROTO_TCP given explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says
    # TCP, and without it each reply's body waits ~40 ms for the client's delayed ACK of the
    # headers (uvicorn writes them separately), which is server time, not harness time.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
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
    cpu_s: float = 0.0  # this process's CPU (all threads; not the sandbox's workers)
    server_cpu_s: float = 0.0  # the fake server's CPU
    server_held_s: float = 0.0  # how long the fake server held this row's requests, summed

    @property
    def per_episode_s(self) -> float:
        return self.seconds / self.episodes


def run_episodes(
    base_url: str,
    tokenizer: object,
    specs: list[EpisodeSpec],
    concurrency: int,
    agent: object,
    warmup: list[EpisodeSpec],
) -> Row:
    """Run `specs` through one AgentLoop at `concurrency` (after `warmup`), timed."""
    engine = OpenAIEngine(
        base_url=base_url, model="beacon", tokenizer=tokenizer, concurrency=concurrency
    )
    with tempfile.TemporaryDirectory() as out, Sandbox() as sandbox:
        with AgentLoop(engine, sandbox, agent, store=ImageStore(Path(out) / "images")) as loop:
            loop.run(warmup, max_active=len(warmup))  # sandbox workers, connections
            before, cpu, start = _server_stats(base_url), time.process_time(), time.perf_counter()
            trajectories = loop.run(specs, max_active=concurrency)
            seconds = time.perf_counter() - start
            cpu, after = time.process_time() - cpu, _server_stats(base_url)
        engine.close()
    errors = [t for t in trajectories if t.finish_reason.endswith("_error")]
    if errors:
        logging.warning("%d episodes failed, e.g.: %s", len(errors), errors[0].error)
    server_cpu, held = (after[key] - before[key] for key in ("cpu_s", "held_s"))
    return Row(concurrency, len(specs), seconds, len(errors), cpu, server_cpu, held)


def start_fake(latency_s: float, tokenizer_path: str = "") -> tuple[subprocess.Popen, str]:
    """The fake server in a process of its own, answering; and its /v1 address."""
    cmd = [sys.executable, __file__, "--serve-fake", str(latency_s), "--tokenizer", tokenizer_path]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    base_url = f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"
    _wait_for(base_url)
    return server, base_url


def fake_rows(args: argparse.Namespace, tokenizer: object) -> list[Row]:
    tok_path = str(cached_tiny_model("qwen2_vl")) if tokenizer is not None else ""
    server, base_url = start_fake(args.latency, tok_path)
    try:
        rows = []
        agent = AgentConfig(max_new_tokens_per_turn=256, max_total_new_tokens=1024)
        synth = get_benchmark("synth")
        warmup = [EpisodeSpec(sample, mode="tool") for sample in synth.load(limit=2, seed=1)]
        for seed, concurrency in enumerate(args.concurrency, start=2):
            # every row its own images (a seed each): none finds an earlier row's in a cache
            samples = synth.load(limit=_fake_episodes(args, concurrency), seed=seed)
            specs = [EpisodeSpec(sample, mode="tool") for sample in samples]
            rows.append(run_episodes(base_url, tokenizer, specs, concurrency, agent, warmup))
        return rows
    finally:
        server.terminate()
        server.wait()


def _fake_episodes(args: argparse.Namespace, concurrency: int) -> int:
    return max(args.min_episodes, args.rounds * concurrency)


def _server_stats(base_url: str) -> dict[str, float]:
    """The fake server's CPU seconds and time spent holding requests; zeros from a server
    without that endpoint (`beacon serve`)."""
    import httpx

    response = httpx.get(base_url.removesuffix("/v1") + "/stats", timeout=30)
    if response.status_code != 200:
        return {"cpu_s": 0.0, "held_s": 0.0}
    return response.json()


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
            rows.append(
                run_episodes(base_url, engine.tokenizer, specs, concurrency, agent, specs[:2])
            )
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


def print_fake(
    rows: list[Row], latency_s: float, with_ids: bool, baseline: list[Row] | None = None
) -> None:
    """The fake-server table; with `baseline` (same concurrencies), both side by side."""
    ids = "with token ids (local tokenizer)" if with_ids else "text only"
    print(f"\nfake server: {latency_s * 1000:.0f} ms per turn, 2 turns + 1 crop per episode, {ids}")
    if baseline is None:
        print(f"{'concurrency':>11} | {'episodes':>8} | {'s/episode':>9} | "
              f"{'harness ms/ep':>13} | {'speed-up':>8} | {'CPU ms/ep':>9} | {'server CPU':>10} | "
              f"{'errors':>6}")  # fmt: skip
        print("-" * 101)
        for row in rows:
            print(
                f"{row.concurrency:>11} | {row.episodes:>8} | {row.per_episode_s:>9.4f} | "
                f"{_harness_ms(row, latency_s):>13.1f} | {_speedup(row, rows):>7.2f}x | "
                f"{_ms(row.cpu_s, row):>9.1f} | {_ms(row.server_cpu_s, row):>10.1f} | "
                f"{row.errors:>6}"
            )
    else:
        print(f"{'':>11} | {'harness ms/episode':^26} | {'speed-up':^26} | "
              f"{'CPU ms/episode':^15} |")  # fmt: skip
        print(f"{'concurrency':>11} | {'before':>8} {'after':>8} {'ratio':>7} | "
              f"{'before':>8} {'after':>8} {'ratio':>7} | {'before':>7} {'after':>7} | "
              f"{'errors':>7}")  # fmt: skip
        print("-" * 99)
        for old, row in zip(baseline, rows, strict=True):
            old_ms, ms = _harness_ms(old, latency_s), _harness_ms(row, latency_s)
            old_up, up = _speedup(old, baseline), _speedup(row, rows)
            print(
                f"{row.concurrency:>11} | {old_ms:>8.1f} {ms:>8.1f} {old_ms / ms:>6.2f}x | "
                f"{old_up:>7.2f}x {up:>7.2f}x {up / old_up:>6.2f}x | "
                f"{_ms(old.cpu_s, old):>7.1f} {_ms(row.cpu_s, row):>7.1f} | "
                f"{old.errors:>3}/{row.errors:<3}"
            )
    print("harness ms/ep = wall time x concurrency / episodes - the time the server held the")
    print("episode's requests (its 2 x latency, timer overshoot and parsing, as it measured them);")
    print("speed-up = s/episode at concurrency 1 / s/episode; CPU ms/ep = this process's CPU")
    print("(all threads) / episodes, not the sandbox's workers' or the server's (server CPU)")


def _harness_ms(row: Row, latency_s: float) -> float:
    """Episode latency (Little's law: wall x concurrency / episodes) minus the server's part,
    as the server measured it; 2 x latency for a server that does not say."""
    held = row.server_held_s / row.episodes if row.server_held_s else 2 * latency_s
    return (row.per_episode_s * row.concurrency - held) * 1000


def _speedup(row: Row, rows: list[Row]) -> float:
    return rows[0].per_episode_s / row.per_episode_s


def _ms(seconds: float, row: Row) -> float:
    return seconds / row.episodes * 1000


def baseline_rows(args: argparse.Namespace) -> list[Row]:
    """The fake rows of another checkout (`--baseline SRC`): this script in a subprocess with
    PYTHONPATH=SRC, run just before this checkout's rows."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        cmd = [sys.executable, __file__, "--skip", "tiny", "--json", str(out),
               "--concurrency", *map(str, args.concurrency), "--latency", str(args.latency),
               "--rounds", str(args.rounds), "--min-episodes", str(args.min_episodes)]  # fmt: skip
        if args.text_only:
            cmd.append("--text-only")
        env = {**os.environ, "PYTHONPATH": args.baseline}
        subprocess.run(cmd, env=env, check=True)
        return [Row(**row) for row in json.loads(out.read_text())]


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
    parser.add_argument("--min-episodes", type=int, default=16, help="fake: at least this many")
    parser.add_argument("--text-only", action="store_true", help="fake: no local tokenizer")
    parser.add_argument("--skip", choices=["fake", "tiny"], nargs="*", default=[])
    parser.add_argument("--limit", type=int, default=16, help="tiny: synth items (x2 modes)")
    parser.add_argument("--tokens", type=int, default=32, help="tiny: max new tokens per turn")
    parser.add_argument("--baseline", help="fake: src folder of a checkout to run first")
    parser.add_argument("--json", help="fake: also write the rows to this file")
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
        baseline = baseline_rows(args) if args.baseline else None
        tokenizer = None
        if not args.text_only:
            from beacon.engines.tokenizer import HFTokenizer

            tokenizer = HFTokenizer.from_pretrained(cached_tiny_model("qwen2_vl"))
        rows = fake_rows(args, tokenizer)
        print(f"load average after the runs: {os.getloadavg()[0]:.1f}")
        if args.json:
            Path(args.json).write_text(json.dumps([vars(row) for row in rows]))
        print_fake(rows, args.latency, tokenizer is not None, baseline)
    if "tiny" not in args.skip:
        print_tiny(tiny_rows(args, samples), args.tokens)


if __name__ == "__main__":
    main()
