"""Groups of episodes for trainers: G responses per prompt, scored, failures dropped and counted.

`Rollouts.groups` runs every episode of a step's groups through one `AgentLoop` (real sandbox,
per-segment temperatures from the loop's `agent:` settings), builds each episode with
`episode_spec` (the benchmark's prompt, seeded from (run seed, step, item, mode, k) alone, so a
resumed run samples the same tokens) and scores each response with the benchmark's scorer
exactly as `beacon eval` does. GRPO, OPD/ReVuE and the teacher check all collect through it.

An episode that failed outside the model (`FAILED_OUTSIDE_MODEL`: engine, sandbox, unreadable
item) says nothing about the policy: it is left out of its group, counted by finish reason in
`RolloutStats.failed` and logged with its cause; a group whose every episode failed is left
out. A step whose every episode failed raises: that is a broken engine, not a result.

A trainer may pass a `check` (`beacon.rollout.checks`): a trajectory that is not what the
engine sampled (images, ids) is left out of its group the same way, counted by reason in
`RolloutStats.inconsistent` and logged, so it is never trained on.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from beacon.agent.episode import Mode
from beacon.agent.loop import AgentLoop
from beacon.benchmarks.base import Benchmark
from beacon.rollout.checks import TrajectoryCheck
from beacon.rollout.episodes import episode_spec, failed_outside_model, score
from beacon.types import Sample, Trajectory
from beacon.verify import Judge, Verdict

logger = logging.getLogger(__name__)


@dataclass
class Group:
    """One prompt's responses and the benchmark's verdicts on them. `item` is the position of
    its sample in the `samples` asked for; `hint` is set for an HGCE group (its responses were
    sampled with the hint)."""

    sample: Sample
    item: int
    trajectories: list[Trajectory]
    verdicts: list[Verdict]
    hint: str | None = None

    @property
    def correct(self) -> list[bool]:
        return [bool(v.correct) for v in self.verdicts]


@dataclass
class RolloutStats:
    """Wall seconds of one `groups` call (episodes: generation and sandbox overlapped; the summed
    sandbox call time inside them; scoring), the episodes run, those dropped by finish reason
    (`failed`) and those dropped by the trainer's check (`inconsistent`, by reason)."""

    episodes_s: float = 0.0
    sandbox_s: float = 0.0
    scoring_s: float = 0.0
    episodes: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    inconsistent: Counter[str] = field(default_factory=Counter)

    def add(self, other: RolloutStats) -> None:
        """Add another collection's times and failure counts (several calls in one step)."""
        self.episodes_s += other.episodes_s
        self.sandbox_s += other.sandbox_s
        self.scoring_s += other.scoring_s
        self.episodes += other.episodes
        self.failed.update(other.failed)
        self.inconsistent.update(other.inconsistent)


class Rollouts:
    """Samples groups of one benchmark through an agent loop."""

    def __init__(
        self,
        loop: AgentLoop,
        bench: Benchmark,
        group_size: int,
        seed: int,
        concurrency: int,
        judge: Judge | None = None,
        check: TrajectoryCheck | None = None,
    ) -> None:
        self.loop, self.bench, self.judge = loop, bench, judge
        self.group_size, self.seed, self.concurrency = group_size, seed, concurrency
        self.check = check

    def groups(
        self, samples: Sequence[Sample], step: int | str, hints: Sequence[str] | None = None
    ) -> tuple[list[Group], RolloutStats]:
        """One group per sample at `step` (the seed scope); with `hints` (aligned to samples)
        the groups are hinted."""
        mode: Mode = "tool" if hints is None else "hinted"
        specs = [
            episode_spec(
                self.bench,
                sample,
                mode,
                k,
                self.seed,
                scope=f"{step}/",
                hint=None if hints is None else hints[i],
            )
            for i, sample in enumerate(samples)
            for k in range(self.group_size)
        ]
        start = time.perf_counter()
        trajectories = self.loop.run(specs, max_active=self.concurrency)
        stats = RolloutStats(episodes_s=time.perf_counter() - start)
        stats.sandbox_s = sum(c.elapsed_s or 0.0 for t in trajectories for c in t.tool_calls)
        start = time.perf_counter()
        verdicts = [
            score(self.bench, t, s.sample, self.judge)
            for s, t in zip(specs, trajectories, strict=True)
        ]
        stats.scoring_s = time.perf_counter() - start
        stats.episodes = len(trajectories)
        stats.failed = _count_failures(trajectories, step)
        usable = [not failed_outside_model(t) and self._passes(t, stats) for t in trajectories]
        out = []
        for i, sample in enumerate(samples):
            part = slice(i * self.group_size, (i + 1) * self.group_size)
            members = [
                (t, v)
                for t, v, ok in zip(trajectories[part], verdicts[part], usable[part], strict=True)
                if ok
            ]
            if members:
                out.append(
                    Group(
                        sample=sample,
                        item=i,
                        trajectories=[t for t, _ in members],
                        verdicts=[v for _, v in members],
                        hint=None if hints is None else hints[i],
                    )
                )
        return out, stats

    def _passes(self, traj: Trajectory, stats: RolloutStats) -> bool:
        """True unless the trainer's check finds the trajectory inconsistent (then counted)."""
        found = None if self.check is None else self.check(traj)
        if found is None:
            return True
        stats.inconsistent[found.reason] += 1
        logger.warning(
            "episode of %s dropped before training (%s): %s",
            traj.sample_id,
            found.reason,
            found.detail,
        )
        return False


def _count_failures(trajectories: Sequence[Trajectory], step: int | str) -> Counter[str]:
    failed = [t for t in trajectories if failed_outside_model(t)]
    if failed and len(failed) == len(trajectories):
        raise RuntimeError(
            f"every episode of step {step} failed outside the model (first: "
            f"{failed[0].finish_reason}: {failed[0].error}); fix the engine or sandbox and "
            "resume the run"
        )
    for traj in failed:
        logger.warning(
            "episode of %s dropped from its group (%s): %s",
            traj.sample_id,
            traj.finish_reason,
            traj.error,
        )
    return Counter(t.finish_reason for t in failed)
