"""Episodes and groups of episodes, built, seeded, scored, checked and filtered one way for
every job. Below `eval`, `data` and `train`, above `agent` and `benchmarks`.

**One episode** as every job runs it: the benchmark's prompt, one seed rule, the benchmark's
scorer, and which failures say nothing about the model (`episode_spec`, `score`,
`failed_outside_model`). `beacon eval`, the data pipeline (through the eval runner) and every
trainer (through `Rollouts`) build their episodes here, so an RL result, a distillation result
and an evaluation saw the same prompts, were scored by the same rule and left out the same
failures.

**Groups for trainers**: G responses per prompt, scored, failures dropped and counted.
`Rollouts.groups` runs every episode of a step's groups through one `AgentLoop` (real sandbox,
per-segment temperatures from the loop's `agent:` settings), builds each episode with
`episode_spec` (seeded from (run seed, step, item, mode, k) alone, so a resumed run samples the
same tokens) and scores each response with the benchmark's scorer exactly as `beacon eval`
does. GRPO, OPD/ReVuE and the teacher check all collect through it. An episode that failed
outside the model (`FAILED_OUTSIDE_MODEL`: engine, sandbox, unreadable item) says nothing about
the policy: it is left out of its group, counted by finish reason in `RolloutStats.failed` and
logged with its cause; a group whose every episode failed is left out. A step whose every
episode failed raises: that is a broken engine, not a result.

**Is a trajectory what the engine sampled?** Checked before any trainer trains on it. A trainer
trains on the ids and images a trajectory records; the policy was sampled on what the engine
saw. When the two differ (images lost or misaligned between turns, another image processor, a
server that rendered the chat again from text, a record altered on the way), the loss is
computed on a sequence the policy never produced, and nothing else notices. So a trainer passes
`Rollouts` a `check` (`check_trajectory`); a trajectory that fails is left out of its group,
counted by reason in `RolloutStats.inconsistent` and logged, so it is never trained on:

- `image_count`: the image-token runs in the ids, the trajectory's image keys and the images
  the engine had at each call (`EngineView.images`) agree;
- `image_tokens`: each image's run is as long as the trainer's image processor makes it (the
  grid t·h·w / merge², so the training forward's pixel grid and M-RoPE positions are the
  engine's);
- `image_missing`: an image key the trainer cannot load;
- `token_ids`: the ids up to the end of each engine call have the length and fingerprint the
  engine reported (`EngineView`): no re-tokenisation drift.

What the check does not cover: a trajectory without token ids (a text-only engine; training
tokenizes it itself) is not checked; calls whose engine reported no context ids are checked for
images only; a grid with the same token count but another shape (h and w swapped) passes.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from beacon.agent.episode import EpisodeSpec, Mode
from beacon.agent.loop import AgentLoop
from beacon.benchmarks.base import Benchmark
from beacon.types import Sample, Trajectory, ids_fingerprint
from beacon.verify import Judge, Verdict

logger = logging.getLogger(__name__)

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


CHECK_REASONS = ("image_count", "image_tokens", "image_missing", "token_ids")
"""Why a trajectory was dropped before training, in the order the checks run."""


@dataclass(frozen=True)
class Inconsistency:
    """Why a trajectory cannot be trained on: one of `CHECK_REASONS`, and what differed."""

    reason: str
    detail: str


TrajectoryCheck = Callable[[Trajectory], Inconsistency | None]
"""A check a trainer hands to `Rollouts`: None when the trajectory may be trained on."""


def check_trajectory(
    traj: Trajectory, image_token_id: int | None, image_tokens: Callable[[str], int] | None = None
) -> Inconsistency | None:
    """The first inconsistency of `traj` (module docstring), or None.

    `image_token_id` is the tokenizer's image pad id; `image_tokens(key)` the number of tokens
    the trainer's processor makes of image `key` (None: run lengths are not checked).
    """
    if not traj.has_token_ids:
        return None
    found = _engine_calls(traj)
    if found is not None:
        return found
    ids = traj.token_ids
    keys = [key for segment in traj.segments for key in segment.images]
    runs = image_runs(ids, image_token_id)
    if len(runs) != len(keys):
        return Inconsistency(
            "image_count", f"{len(runs)} image-token runs in the ids but {len(keys)} images"
        )
    if image_tokens is not None:
        return _run_lengths(runs, keys, image_tokens)
    return None


def _engine_calls(traj: Trajectory) -> Inconsistency | None:
    """Compare the trajectory with what the engine reported at the end of each call."""
    ids: list[int] = []
    images = 0
    for segment in traj.segments:
        ids.extend(segment.token_ids)
        images += len(segment.images)
        view = segment.engine
        if view is None:
            continue
        if view.images != images:
            return Inconsistency(
                "image_count",
                f"the engine had {view.images} images at token {view.tokens}, the trajectory "
                f"holds {images} there",
            )
        if view.tokens != len(ids) or view.fingerprint != ids_fingerprint(ids):
            return Inconsistency(
                "token_ids",
                f"the engine's {view.tokens} ids of a call differ from the trajectory's "
                f"{len(ids)} (re-tokenised or altered)",
            )
    return None


def _run_lengths(
    runs: list[int], keys: list[str], image_tokens: Callable[[str], int]
) -> Inconsistency | None:
    for index, (run, key) in enumerate(zip(runs, keys, strict=True)):
        try:
            expected = image_tokens(key)
        except (KeyError, OSError, ValueError) as exc:
            return Inconsistency("image_missing", f"image {index} ({key}): {exc}")
        if run != expected:
            return Inconsistency(
                "image_tokens",
                f"image {index} has {run} tokens in the ids but the trainer's processor makes "
                f"{expected}",
            )
    return None


def image_runs(ids: list[int], image_token_id: int | None) -> list[int]:
    """Lengths of the runs of `image_token_id` in `ids`, in order (one run per image)."""
    runs: list[int] = []
    previous = None
    for token in ids:
        if token == image_token_id:
            if previous == image_token_id:
                runs[-1] += 1
            else:
                runs.append(1)
        previous = token
    return runs


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
