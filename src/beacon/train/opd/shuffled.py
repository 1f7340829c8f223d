"""The shuffled-reflection content control (`revue.reflection_source: shuffled`).

ReVuE's gain could come from a reflection's format, length, stage mix or the way its impacts
reshape the weights rather than from what it says about the item. The control keeps all of that
and removes the content: every rollout that has a reflection of its own gets, instead, a whole
reflection (text and anchor support images together) that the critic and Algorithm 4 assembled
for a *different* item, and the step goes on unchanged (same impacts, weights and loss).

Donors. A donor is one assembled reflection, rendered (`reflection_text`) with its anchor's
support image keys, which are that other item's crops in the run's ImageStore. A rollout draws
from the donors of other items (never its own item, compared by sample id) of its item's
family (`family`: the benchmark and `metadata["kind"]`, so a task's reflections are swapped
among its own items and keep their format in a pool that mixes tasks). The step's groups come
first; when no other item of the family has a reflection in the step (e.g. one group per step),
the donors are those kept from the last earlier step that had some of that family. If neither
has one, the rollout keeps no reflection (the base teacher is its target) and is counted
(`revue/shuffled_none`).

Matching. A rollout with a complete reflection draws a complete one, a diagnosis-only one a
diagnosis-only one; among those, donors with the rollout's own break-point stage come first, so
a correct rollout keeps a "none; the answer is correct" break point and the stage mix stays the
one the critic wrote. Rollouts without a reflection stay without one.

Determinism. The draw is seeded by (train.seed, step, group slot, rollout index), and the
donors are ordered by (step, group slot, rollout index); the earlier steps' donors are read from
`POOL_FILE` in the run folder, written at the end of every step that had donors and keyed by
step (each family's last step kept), so a run killed and resumed at any point draws the same
reflections. The student's sequences are never touched: only the teacher's context changes
(`step.reflection_context`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from beacon.jsonl import write_atomic
from beacon.rollout import episode_seed
from beacon.train.opd.assemble import Reflection
from beacon.train.opd.score import reflection_text
from beacon.types import Sample

REFLECTION_SOURCES = ("own", "shuffled")
"""`revue.reflection_source`: each rollout's own reflection (ReVuE), or another item's."""

POOL_FILE = "revue_shuffle_pool.json"
"""Donors kept for the next steps of a shuffled run, by step (module docstring)."""


@dataclass(frozen=True)
class Donor:
    """One assembled reflection as the teacher receives it, and where it came from."""

    item: str
    family: str
    step: int
    group: int
    slot: int
    complete: bool
    stage: str
    text: str
    keys: tuple[str, ...]

    @classmethod
    def of(
        cls, reflection: Reflection, item: str, family: str, step: int, group: int, slot: int
    ) -> Donor:
        keys = reflection.anchor.support_image_keys if reflection.anchor else ()
        return cls(
            item=item,
            family=family,
            step=step,
            group=group,
            slot=slot,
            complete=reflection.complete,
            stage=reflection.break_point.stage,
            text=reflection_text(reflection),
            keys=tuple(keys),
        )


def family(sample: Sample) -> str:
    """The items whose reflections may stand in for each other: one benchmark's one kind."""
    return f"{sample.benchmark}/{sample.metadata.get('kind', '')}"


@dataclass(frozen=True)
class GroupReflections:
    """One group of the step: its slot, its item's sample id and family, its own reflections."""

    group: int
    item: str
    reflections: Sequence[Reflection | None]
    family: str = ""

    @classmethod
    def of(cls, group: int, sample: Sample, reflections: Sequence[Reflection | None]):
        return cls(group, sample.id, reflections, family(sample))


def step_donors(groups: Sequence[GroupReflections], step: int) -> list[Donor]:
    """Every reflection of the step's groups as a donor, in (group slot, rollout) order."""
    return [
        Donor.of(r, g.item, g.family, step, g.group, i)
        for g in sorted(groups, key=lambda g: g.group)
        for i, r in enumerate(g.reflections)
        if r is not None
    ]


@dataclass
class Assignment:
    """Each rollout's borrowed reflection (`donors[group][i]`, None: no reflection) and counts:
    `none` rollouts had a reflection but no donor of another item, `previous` were served from
    an earlier step's pool."""

    donors: dict[int, list[Donor | None]]
    none: int = 0
    previous: int = 0


def shuffled_assignment(
    groups: Sequence[GroupReflections], previous: Sequence[Donor], seed: int, step: int | str
) -> Assignment:
    """The borrowed reflection of every rollout of the step (module docstring)."""
    current = step_donors(groups, 0 if isinstance(step, str) else step)
    out = Assignment({})
    for g in groups:
        others = [d for d in current if d.item != g.item and d.family == g.family]
        from_previous = not others
        if from_previous:
            others = [d for d in previous if d.item != g.item and d.family == g.family]
        chosen: list[Donor | None] = []
        for i, own in enumerate(g.reflections):
            if own is None:
                chosen.append(None)
                continue
            rng = random.Random(episode_seed(seed, f"{step}/shuffle/{g.group}/{i}"))
            donor = _draw(own, others, rng)
            out.none += donor is None
            out.previous += donor is not None and from_previous
            chosen.append(donor)
        out.donors[g.group] = chosen
    return out


def _draw(own: Reflection, donors: Sequence[Donor], rng: random.Random) -> Donor | None:
    """A donor of the same kind, its break-point stage matched when one has it."""
    kind = [d for d in donors if d.complete == own.complete]
    same_stage = [d for d in kind if d.stage == own.break_point.stage]
    pool = same_stage or kind
    return rng.choice(pool) if pool else None


def read_pool(run_dir: Path, step: int) -> list[Donor]:
    """Per family, the donors of the last step before `step` that had some (module docstring)."""
    entries = _read(run_dir / POOL_FILE)
    latest = _latest_per_family(entries, step)
    return [
        Donor(**{**d, "keys": tuple(d["keys"])})
        for s in sorted(set(latest.values()))
        for d in entries[s]
        if latest[d["family"]] == s
    ]


def write_pool(run_dir: Path, step: int, donors: Sequence[Donor]) -> None:
    """Keep `donors` as step `step`'s, with the earlier steps still the last of a family (a
    step redone after a resume then still finds its predecessors')."""
    if not donors:
        return
    path = run_dir / POOL_FILE
    entries = _read(path)
    kept = {s: entries[s] for s in set(_latest_per_family(entries, step).values())}
    kept[step] = [asdict(d) for d in donors]
    write_atomic(path, json.dumps({str(k): v for k, v in sorted(kept.items())}) + "\n")


def _latest_per_family(entries: dict[int, list[dict]], step: int) -> dict[str, int]:
    """Family -> the last step before `step` that kept donors of it."""
    latest: dict[str, int] = {}
    for s in sorted(k for k in entries if k < step):
        for d in entries[s]:
            latest[d["family"]] = s
    return latest


def _read(path: Path) -> dict[int, list[dict]]:
    if not path.exists():
        return {}
    return {int(k): v for k, v in json.loads(path.read_text()).items()}
