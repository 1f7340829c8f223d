"""Turns gathered into one call (`beacon.agent.gather`) against whatever is pending, side by side.

Runs GRPO-shaped rollouts through the real agent loop, the real sandbox and the built-in tiny
Qwen2-VL on CPU: `--prompts` synth items x `--group-size` episodes each, all started together,
temperature 1. The tiny model samples through `ScriptChoice` (answer one of the items' answers,
or crop then answer), so about half the episodes run a tool call and ask a second time. The
baseline is the same loop with gathering off, which is what the loop does for a remote engine:
the engine is wrapped so that it reads `remote = True`, and the hf engine's batching queue runs
whatever is pending. Reports generate calls and wall seconds per rollout round (mean of
`--rounds` after a warm-up, the two modes alternating) and their ratio. A benchmark, not a test.

    python benchmarks/turn_gather.py --prompts 6 --group-size 8 --rounds 4
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any


class Counted:
    """Wraps `engine.generate`: counts the calls and the requests in them."""

    def __init__(self, engine: Any) -> None:
        self.inner, self.calls, self.requests = engine.generate, 0, 0

    def __call__(self, requests: Any) -> Any:
        self.calls += 1
        self.requests += len(requests)
        return self.inner(requests)


class Ungathered:
    """The engine as a remote one: the agent loop sends each request as soon as it is ready."""

    remote = True

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4, help="timed rounds per mode")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    args = parser.parse_args()

    import torch

    from beacon.agent.config import AgentConfig
    from beacon.agent.episode import EpisodeSpec
    from beacon.agent.loop import AgentLoop
    from beacon.benchmarks import get_benchmark
    from beacon.engines import load_engine
    from beacon.engines.tiny import cached_tiny_model
    from beacon.fakes.logits import synth_choices
    from beacon.sandbox import Sandbox

    torch.set_num_threads(args.threads)
    rollouts = args.prompts * args.group_size
    engine = load_engine("hf", str(cached_tiny_model()), batch_size=rollouts)
    samples = list(get_benchmark("synth").load(limit=args.prompts, seed=0))
    answers = sorted({s.answer for s in samples})
    engine.logits_processors = [synth_choices(engine.tokenizer, answers)]
    counted = Counted(engine)
    engine.generate = counted
    agent = AgentConfig(
        max_turns=3,
        max_new_tokens_per_turn=40,
        max_total_new_tokens=96,
        temperature=1.0,
        code_temperature=0.0,
    )
    modes = {"whatever is pending": Ungathered(engine), "gathered": engine}
    results: dict[str, list[tuple[float, int, float]]] = {name: [] for name in modes}
    with Sandbox() as sandbox:
        loops = {name: AgentLoop(e, sandbox, agent) for name, e in modes.items()}
        for round_ in range(args.rounds + 1):
            for name, loop in loops.items():
                specs = [
                    EpisodeSpec(s, mode="tool", k=k, seed=1000 * round_ + k)
                    for s in samples
                    for k in range(args.group_size)
                ]
                counted.calls = counted.requests = 0
                start = time.perf_counter()
                loop.run(specs, max_active=rollouts)
                seconds = time.perf_counter() - start
                if round_ > 0:
                    results[name].append((seconds, counted.calls, counted.requests / counted.calls))
        for loop in loops.values():
            loop.close()
    report(results, args)


def report(results: dict[str, list[tuple[float, int, float]]], args: argparse.Namespace) -> None:
    print(
        f"{args.prompts} prompts x G={args.group_size} rollouts of the tiny Qwen2-VL on CPU "
        f"({args.threads} threads), real sandbox; mean of {args.rounds} rounds after a warm-up"
    )
    print(f"{'':22s} {'s/round':>8s} {'calls':>6s} {'requests/call':>14s}")
    means = {}
    for name, rows in results.items():
        means[name] = statistics.mean(r[0] for r in rows)
        calls = statistics.mean(r[1] for r in rows)
        size = statistics.mean(r[2] for r in rows)
        print(f"{name:22s} {means[name]:8.2f} {calls:6.1f} {size:14.1f}")
    baseline, gathered = means["whatever is pending"], means["gathered"]
    print(f"gathered / whatever is pending: {gathered / baseline:.2f}x the time")


if __name__ == "__main__":
    main()
