"""GRPO rollouts: G responses per prompt through the agent loop, verified by the benchmark.

One call of `Rollouts.groups` runs every episode of a step's groups through one `AgentLoop`
(real sandbox, per-segment temperatures from `agent:`), then scores each response with the
benchmark's scorer exactly as `beacon eval` does (`beacon.eval.runner.score`). Every episode is
seeded from (run seed, step, sample id, mode, k) alone, so a resumed run samples the same tokens.

HGCE hints (beacon.md §4, steps 1-2): `HintSource` gives the item's cached answer-free hint from
the data pipeline's JSONL (`{benchmark, sample_id, hint}` rows); items without one can fall back
to a scripted hint: the benchmark's own (`metadata["hint"]`, e.g. `synth_demo`'s search items)
or, for `synth`, `synth_region_hint` built from the item's metadata region. The
recipe checks every hint with `beacon.rl.check_hint` before it is shown.

What is not covered: generating missing hints through the expert (the data pipeline's job);
without a cached or scripted hint an all-wrong group is simply not rescued (counted).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from beacon.agent.episode import EpisodeSpec, Mode
from beacon.agent.loop import AgentLoop
from beacon.benchmarks.base import Benchmark
from beacon.eval.runner import episode_seed, sample_key, score
from beacon.rl import GroupOutcomes, group_outcomes
from beacon.types import Sample, Trajectory

logger = logging.getLogger(__name__)


@dataclass
class Group:
    """One prompt's G responses and their verdicts; `hint` is set for an HGCE group."""

    sample: Sample
    trajectories: list[Trajectory]
    correct: list[bool]
    hint: str | None = None

    def outcomes(self) -> GroupOutcomes:
        """The group's record for `beacon.rl` (the item's difficulty label when it has one)."""
        label = self.sample.metadata.get("difficulty")
        return group_outcomes(
            self.trajectories, self.correct, label if label in ("easy", "hard") else None
        )


@dataclass
class RolloutTimes:
    """Wall seconds of one `groups` call: episodes (generation and sandbox overlap), the summed
    sandbox call time inside them, and scoring."""

    episodes_s: float = 0.0
    sandbox_s: float = 0.0
    scoring_s: float = 0.0

    def add(self, other: RolloutTimes) -> None:
        self.episodes_s += other.episodes_s
        self.sandbox_s += other.sandbox_s
        self.scoring_s += other.scoring_s


class Rollouts:
    """Samples groups of one benchmark through an agent loop."""

    def __init__(
        self, loop: AgentLoop, bench: Benchmark, group_size: int, seed: int, concurrency: int
    ) -> None:
        self.loop, self.bench = loop, bench
        self.group_size, self.seed, self.concurrency = group_size, seed, concurrency

    def groups(
        self, samples: Sequence[Sample], step: int, hints: Sequence[str] | None = None
    ) -> tuple[list[Group], RolloutTimes]:
        """One group per sample; with `hints` (aligned to samples) the groups are hinted."""
        mode: Mode = "tool" if hints is None else "hinted"
        specs = [
            EpisodeSpec(
                sample,
                mode=mode,
                k=k,
                question=self.bench.prompt(sample),
                hint=None if hints is None else hints[i],
                seed=episode_seed(
                    self.seed, f"{step}/{sample_key(sample.benchmark, sample.id, mode, k)}"
                ),
            )
            for i, sample in enumerate(samples)
            for k in range(self.group_size)
        ]
        start = time.perf_counter()
        trajectories = self.loop.run(specs, max_active=self.concurrency)
        times = RolloutTimes(episodes_s=time.perf_counter() - start)
        times.sandbox_s = sum(c.elapsed_s or 0.0 for t in trajectories for c in t.tool_calls)
        start = time.perf_counter()
        verdicts = [
            score(self.bench, t, s.sample, None) for s, t in zip(specs, trajectories, strict=True)
        ]
        times.scoring_s = time.perf_counter() - start
        failed = [t for t in trajectories if t.error]
        if failed and len(failed) == len(trajectories):
            raise RuntimeError(
                f"every episode of GRPO step {step} failed on the engine or sandbox, not the "
                f"model (first: {failed[0].error}); fix the cause and resume the run"
            )
        for traj in failed:
            logger.warning(
                "episode %s failed, left out of its group: %s", traj.sample_id, traj.error
            )
        out = []
        for i, sample in enumerate(samples):
            part = slice(i * self.group_size, (i + 1) * self.group_size)
            # An engine or sandbox failure says nothing of the policy: such an episode gets no
            # reward and no gradient (it may hold no tokens at all); the rest of its group trains.
            members = [
                (t, v.correct)
                for t, v in zip(trajectories[part], verdicts[part], strict=True)
                if not t.error
            ]
            if members:
                out.append(
                    Group(
                        sample=sample,
                        trajectories=[t for t, _ in members],
                        correct=[c for _, c in members],
                        hint=None if hints is None else hints[i],
                    )
                )
        return out, times


class HintSource:
    """The item's cached hint, else (when enabled) a scripted one: the benchmark's own
    answer-free `metadata["hint"]` (`synth_demo`), or for `synth` the region hint."""

    def __init__(self, path: str | None, synth_region_hints: bool) -> None:
        self.cache = read_hints(Path(path)) if path else {}
        self.synth_region_hints = synth_region_hints

    def hint(self, sample: Sample) -> str | None:
        cached = self.cache.get((sample.benchmark, sample.id))
        if cached is not None:
            return cached
        if not self.synth_region_hints:
            return None
        if isinstance(sample.metadata.get("hint"), str):
            return sample.metadata["hint"]
        return synth_region_hint(sample) if sample.benchmark == "synth" else None


def read_hints(path: Path) -> dict[tuple[str, str], str]:
    """(benchmark, sample_id) -> hint from the data pipeline's JSONL."""
    out: dict[tuple[str, str], str] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if not isinstance(row, dict) or not {"benchmark", "sample_id", "hint"} <= row.keys():
            raise ValueError(
                f"{path}:{n}: a hint row needs benchmark, sample_id and hint keys; fix the file "
                "or unset rollout.hints"
            )
        out[(str(row["benchmark"]), str(row["sample_id"]))] = str(row["hint"])
    return out


def synth_region_hint(sample: Sample) -> str | None:
    """A scripted, answer-free HGCE hint for a synth item: where the evidence is, and to zoom.

    Built from `metadata["region"]` (pixels of the full image) alone; it names no value of the
    answer, and the recipe still runs `check_hint` on it (a coordinate can coincide with a
    numeric answer, and such a hint is then refused).
    """
    region = sample.metadata.get("region")
    if not region or len(region) != 4:
        return None
    x0, y0, x1, y1 = (int(v) for v in region)
    return (
        f"The evidence is inside the box ({x0}, {y0}, {x1}, {y1}) of the image (pixels). Crop "
        "that region with a margin, enlarge it, and read it before answering."
    )


def gather_outcomes(acc: Any, local: list[GroupOutcomes]) -> tuple[list[GroupOutcomes], int]:
    """Every process's group outcomes in rank order, and where this process's responses start."""
    from accelerate.utils import gather_object

    per_rank = gather_object([local]) if acc.num_processes > 1 else [local]
    offset = sum(g.size for rank in per_rank[: acc.process_index] for g in rank)
    return [g for rank in per_rank for g in rank], offset
