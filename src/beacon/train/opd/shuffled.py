"""The shuffled-reflection content control (`revue.reflection_source: shuffled`).

ReVuE's gain could come from a reflection's format, length, stage mix or the way its impacts
reshape the weights rather than from what it says about the item. The control keeps all of that
and removes the content: every rollout that has a reflection of its own gets, instead, a whole
reflection (text and anchor support images together) that the critic and Algorithm 4 assembled
for a *different* item, and the step goes on unchanged (same impacts, weights and loss).

Donors. A donor is one assembled reflection, rendered (`reflection_text`) with its anchor's
support image keys, which are that other item's crops in the run's ImageStore. The pool of a
step is the reflections of the step's groups; a rollout draws from the donors of other items
(never its own item, compared by sample id). When no other item of the step has a reflection
(e.g. one group per step, or one group with reflections), the pool is the reflections kept from
the last earlier step that had any. If neither has a donor of another item, the rollout keeps
no reflection (the base teacher is its target) and is counted (`revue/shuffled_none`).

Matching. A rollout with a complete reflection draws a complete one, a diagnosis-only one a
diagnosis-only one; among those, donors with the rollout's own break-point stage come first, so
a correct rollout keeps a "none; the answer is correct" break point and the stage mix stays the
one the critic wrote. Rollouts without a reflection stay without one.

Determinism. The draw is seeded by (train.seed, step, group slot, rollout index), and the
donors are ordered by (step, group slot, rollout index); the earlier step's donors are read
from `POOL_FILE` in the run folder, written at the end of every step that had donors and keyed
by step, so a run killed and resumed at any point draws the same reflections. The student's
sequences are never touched: only the teacher's context changes (`step.reflection_context`).
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
from beacon.train.opd.conditioning import reflection_text

REFLECTION_SOURCES = ("own", "shuffled")
"""`revue.reflection_source`: each rollout's own reflection (ReVuE), or another item's."""

POOL_FILE = "revue_shuffle_pool.json"
"""Donors kept for the next steps of a shuffled run, by step (module docstring)."""


@dataclass(frozen=True)
class Donor:
    """One assembled reflection as the teacher receives it, and where it came from."""

    item: str
    step: int
    group: int
    slot: int
    complete: bool
    stage: str
    text: str
    keys: tuple[str, ...]

    @classmethod
    def of(cls, reflection: Reflection, item: str, step: int, group: int, slot: int) -> Donor:
        keys = reflection.anchor.support_image_keys if reflection.anchor else ()
        return cls(
            item=item,
            step=step,
            group=group,
            slot=slot,
            complete=reflection.complete,
            stage=reflection.break_point.stage,
            text=reflection_text(reflection),
            keys=tuple(keys),
        )


@dataclass(frozen=True)
class GroupReflections:
    """One group of the step: its slot, its item's sample id and its own reflections."""

    group: int
    item: str
    reflections: Sequence[Reflection | None]


def step_donors(groups: Sequence[GroupReflections], step: int) -> list[Donor]:
    """Every reflection of the step's groups as a donor, in (group slot, rollout) order."""
    return [
        Donor.of(r, g.item, step, g.group, i)
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
        others = [d for d in current if d.item != g.item]
        from_previous = not others
        if from_previous:
            others = [d for d in previous if d.item != g.item]
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
    """The donors of the last step before `step` that had any (empty when there is none)."""
    entries = _read(run_dir / POOL_FILE)
    earlier = [s for s in entries if s < step]
    if not earlier:
        return []
    return [Donor(**{**d, "keys": tuple(d["keys"])}) for d in entries[max(earlier)]]


def write_pool(run_dir: Path, step: int, donors: Sequence[Donor]) -> None:
    """Keep `donors` as step `step`'s pool, with the last earlier pool (a step redone after a
    resume then still finds its predecessor's)."""
    if not donors:
        return
    path = run_dir / POOL_FILE
    entries = _read(path)
    earlier = [s for s in entries if s < step]
    kept = {max(earlier): entries[max(earlier)]} if earlier else {}
    kept[step] = [asdict(d) for d in donors]
    write_atomic(path, json.dumps({str(k): v for k, v in sorted(kept.items())}) + "\n")


def _read(path: Path) -> dict[int, list[dict]]:
    if not path.exists():
        return {}
    return {int(k): v for k, v in json.loads(path.read_text()).items()}
