"""One GRPO step's time split on CPU with the tiny model: where does a step go?

Runs the real recipe step (`beacon.train.grpo.recipe.grpo_step`: rollouts through the agent loop
with the real sandbox, verification, HGCE, `score_groups`, old log-probs, clipped loss,
optimizer, weight sync) on synth items with the built-in tiny Qwen2-VL. The random tiny model
samples through `ScriptChoice` (answer one of the items' answers, or crop then answer), so
groups have reward variance and the update is real. Checkpointing is left out (it is not per step).

Model compute = time inside the engine's `generate` (summed over its batches) + old log-probs
+ forward/backward + optimizer step. Orchestration = the rest of the step: the agent loop,
sandbox calls not hidden behind generation, scoring, tokenizing, collate, weight sync. The
first step is a warm-up and is not counted. A benchmark, not a test.

    python benchmarks/grpo_step.py --prompts 4 --group-size 8 --steps 3
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

PARTS = (
    ("generation (engine.generate)", "gen_s"),
    ("rollout wall (agent loop, incl. generation)", "time/rollout_s"),
    ("  sandbox calls (summed, overlap generation)", "time/sandbox_s"),
    ("scoring (verify)", "time/scoring_s"),
    ("old log-probs (HGCE forwards)", "time/old_logprobs_s"),
    ("update (forward + backward)", "time/update_s"),
    ("optimizer step", "time/optimizer_s"),
    ("weight sync into the engine", "time/weight_sync_s"),
    ("other (rows, collate, metrics)", "other_s"),
)
TIMED = (
    "time/rollout_s",
    "time/scoring_s",
    "time/old_logprobs_s",
    "time/update_s",
    "time/optimizer_s",
    "time/weight_sync_s",
)
"""The parts that add up to a step (sandbox and generation time are inside the rollout's)."""


class TimedGenerate:
    """Wraps `engine.generate` and sums the seconds spent inside it."""

    def __init__(self, engine: Any) -> None:
        self.inner, self.seconds = engine.generate, 0.0

    def __call__(self, requests: Any) -> Any:
        start = time.perf_counter()
        try:
            return self.inner(requests)
        finally:
            self.seconds += time.perf_counter() - start


def settings(out: Path, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "model": {"path": "tiny"},
        "train": {"output_dir": str(out), "max_steps": 100, "lr": 2e-4, "min_lr_ratio": 1.0},
        "rollout": {
            "limit": args.prompts,
            "prompts_per_step": args.prompts,
            "group_size": args.group_size,
            "concurrency": args.prompts * args.group_size,
            "engine_batch_size": args.prompts * args.group_size,
        },
        "agent": {
            "max_turns": 3,
            "max_new_tokens_per_turn": 40,
            "max_total_new_tokens": 96,
            "temperature": 1.0,
            "code_temperature": 0.0,
        },
        "rl": {"reward": "naar", "hgce": {"enabled": True}},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    report(time_steps(args), args)


def time_steps(args: argparse.Namespace, overrides: dict[str, dict] | None = None) -> list[dict]:
    """`args.steps` timed steps after one warm-up, each step's metrics with the engine's
    generation time (`gen_s`) and the rest of the step (`other_s`); `overrides` update the
    config's sections (`{"model": {"path": ...}}`; default: the tiny model)."""
    from beacon.fakes.logits import synth_choices
    from beacon.train.core import train_loop as loop
    from beacon.train.core.checkpoint import TrainState
    from beacon.train.core.setup import make_accelerator
    from beacon.train.grpo.config import GRPOConfig
    from beacon.train.grpo.recipe import build_parts, grpo_step, resolve_model, sync_weights

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        raw = settings(Path(tmp) / "run", args)
        for section, values in (overrides or {}).items():
            raw[section] = raw.get(section, {}) | values
        cfg = resolve_model(GRPOConfig.model_validate(raw))
        accelerator = make_accelerator(cfg.model, cfg.train)
        parts = build_parts(cfg, accelerator, Path(tmp) / "run", stack)
        answers = sorted({s.answer for s in parts.samples})
        parts.engine.logits_processors = [synth_choices(parts.engine.tokenizer, answers)]
        timer = TimedGenerate(parts.engine)
        parts.engine.generate = timer
        sync_weights(parts)
        parts.policy.model.train()
        state, rows = TrainState(step=0, samples_seen=0), []
        for i in range(args.steps + 1):
            timer.seconds = 0.0
            state, metrics = loop.run_step(
                parts.policy,
                cfg.train,
                state,
                step=lambda state: grpo_step(parts, cfg, state),
                sync=lambda: sync_weights(parts),
            )
            metrics["gen_s"] = timer.seconds
            metrics["other_s"] = metrics["step_s"] - sum(metrics[k] for k in TIMED)
            if i > 0:
                rows.append(metrics)
    return rows


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    step = statistics.mean(r["step_s"] for r in rows)
    print(
        f"GRPO step on {platform.processor() or platform.machine()}, {args.threads} thread(s): "
        f"tiny Qwen2-VL, synth, {args.prompts} prompts x G={args.group_size}, "
        f"mean of {len(rows)} steps after a warm-up"
    )
    print(f"{'part':48s} {'s/step':>8s} {'share':>7s}")
    for name, key in PARTS:
        value = statistics.mean(r[key] for r in rows)
        print(f"{name:48s} {value:8.3f} {value / step:7.1%}")
    print(f"{'step':48s} {step:8.3f} {1:7.1%}")
    compute_keys = ("gen_s", "time/old_logprobs_s", "time/update_s", "time/optimizer_s")
    compute = statistics.mean(sum(r[k] for k in compute_keys) for r in rows)
    print(
        f"model compute {compute:.3f} s, orchestration {step - compute:.3f} s = "
        f"{(step - compute) / step:.1%} of the step"
    )
    kept = statistics.mean(r["sequences"] for r in rows)
    hinted = statistics.mean(r["rl/groups_hinted"] for r in rows)
    print(f"trained responses per step {kept:.1f}, hinted groups per step {hinted:.1f}")


if __name__ == "__main__":
    main()
