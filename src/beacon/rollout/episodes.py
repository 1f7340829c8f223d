"""One episode as every job runs it: the benchmark's prompt, one seed rule, the benchmark's
scorer, and which failures say nothing about the model.

`beacon eval`, the data pipeline (through the eval runner), and every trainer (through
`beacon.rollout.groups.Rollouts`) build their episodes here, so an RL result, a distillation
result and an evaluation saw the same prompts, were scored by the same rule and left out the
same failures.
"""

from __future__ import annotations

import zlib

from beacon.agent.episode import EpisodeSpec, Mode
from beacon.benchmarks.base import Benchmark
from beacon.types import Sample, Trajectory
from beacon.verify import Judge, Verdict

RETRIED = frozenset({"engine_error", "sandbox_error"})
"""Finish reasons of episodes that failed on the engine (server down, HTTP errors after retries)
or the sandbox itself: not results. `beacon eval` never writes them to samples.jsonl (so no
metric counts them), logs them to errors.jsonl and retries them on rerun. Everything else is a
result: the model's doing (bad code, its code timing out, no answer, budgets spent) or the
item's (`input_error`: an image that cannot be decoded fails again)."""
FAILED_OUTSIDE_MODEL = RETRIED | {"input_error"}
"""Finish reasons that say nothing about the policy (`RETRIED`, or an item whose image cannot be
read): a trainer drops such an episode from its group and counts it."""


def sample_key(benchmark: str, sample_id: str, mode: str, k: int) -> str:
    """The episode's name in records: benchmark / item / mode / sample index."""
    return f"{benchmark}/{sample_id}/{mode}/{k}"


def episode_seed(base: int, key: str) -> int:
    """A per-episode seed that does not depend on order, so a resumed run samples the same."""
    return (base * 1_000_003 + zlib.crc32(key.encode())) % (2**31)


def episode_spec(
    bench: Benchmark,
    sample: Sample,
    mode: Mode,
    k: int,
    seed: int,
    scope: str = "",
    hint: str | None = None,
) -> EpisodeSpec:
    """Episode k of `sample` in `mode`: the benchmark's prompt (question and options), seeded
    from (`seed`, `scope` + its key). Eval uses no scope; a trainer scopes by step, so step s
    samples an item anew while a resumed step samples exactly what the first attempt did."""
    key = sample_key(bench.name, sample.id, mode, k)
    return EpisodeSpec(
        sample,
        mode=mode,
        k=k,
        question=bench.prompt(sample),
        hint=hint,
        seed=episode_seed(seed, scope + key),
    )


def score(bench: Benchmark, trajectory: Trajectory, sample: Sample, judge: Judge | None) -> Verdict:
    """The benchmark's verdict on what the model wrote (observations are not its words)."""
    return bench.score(trajectory.generated_text, sample, judge=judge)


def failed_outside_model(trajectory: Trajectory) -> bool:
    """True when the episode ended on the engine, the sandbox or an unreadable item."""
    return trajectory.finish_reason in FAILED_OUTSIDE_MODEL
