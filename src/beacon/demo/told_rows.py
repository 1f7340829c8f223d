"""The teacher's `told` rows for demo II: plain, reflection-conditioned and wrong-path rows.

Design: `../shared/research/demo2_design.md` §2.5 items 1-3. ReVuE's lever on `synth_keys_told`
is a constructed teacher weakness (§5.1 G1): the teacher's plain red rows (`red_plain`, 30%) map
a red key (which counts from the other end) as a grey one, as the cold start every demo model
comes from does (`beacon.demo.data`), while its reflection-conditioned rows (`red_conditioned`,
50%) crop the cell the red key names; so unconditionally it maps a red key as a grey one, and
with the critic's reflection it crops the cell the reflection names. Every row comes from a
real, correct tool-mode episode of the scripted expert (`beacon.demo.expert`) on a `told` item:

1. **plain**: the episode as it is (a red key's: mapped as a grey one, `red_plain_mapping`);
2. **conditioned**: the episode (target: the expert's correct trajectory) with the reflection the
   scripted critic would give a student rollout of its item, placed by `conditioned` where the
   OPD teacher reads it. The rollout is drawn from `ATTEMPTS` (right, the other colour's mapping,
   no key crop, a misnoted key, a misread cell) and judged by the critic's own `synth_keys` rules
   (`keys_break`); the anchor is a correct sibling's two crops (the expert's key and cell crops),
   except for a `diagnosis_only` share of the wrong attempts (all-wrong groups have no anchor);
3. **wrong_path** (R5, "grounded downstream"): a red-key episode whose prefix maps the key as a
   grey one (`Key: k red.`, then a crop of cell k, not 9 - k), with the real crop of that cell as
   its observation, conditioned on the reflection naming the right cell. The prefix's generated
   segments carry `loss_mask=[0]` (context, not target: `beacon.train.core.encode`), and the
   supervised continuation answers the digit the wrong crop shows, so the teacher learns to stay
   consistent with the evidence after a broken link (the paper's Fig. 3) instead of pushing the
   reference answer against it (§5.1 G2).

Row colours follow `synth_keys.is_red` over the row index (a share held to within one row);
items are drawn per colour from a seeded shuffle of the expert's episodes, cycling when a kind
needs more rows than the pool holds.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from beacon.benchmarks.synth_keys import is_red, named_cell
from beacon.data.eval_stages import copy_images, run_trajectories
from beacon.data.records import write_training_set
from beacon.demo.expert import KEY_NOTE, RED_NOTE, crop_code, key_note, keys_crops
from beacon.demo.teacher_data import conditioned, sibling_anchor
from beacon.images import ImageStore
from beacon.train.opd.assemble import BreakPoint, Reflection
from beacon.train.opd.scripted_critic import KEYS_GROUNDING, covering_support, keys_break
from beacon.types import ImageCrop, Sample, Trajectory

TOLD_DATA = "teacher-told"
ATTEMPTS = ("right", "mapping", "no_key", "misnoted", "misread")
"""Student rollouts a conditioned row's reflection judges, drawn uniformly: the expert's own
(CORRECT), the key mapped by the other colour's convention, a cell cropped without the key, a
key noted wrong (then its cell cropped), the right cell cropped and misread."""


@dataclass(frozen=True)
class ToldPlan:
    """How many rows of each kind, and the shares that make the teacher's weakness."""

    plain: int = 600
    conditioned: int = 600
    wrong_path: int = 150
    red_plain: float = 0.30
    red_conditioned: float = 0.50
    diagnosis_only: float = 0.50
    """Wrong attempts whose reflection has no anchor. Half: the student every demo model comes
    from maps every red key as a grey one, so its red groups are all wrong and the critic's
    reflections there carry no sibling's anchor; the teacher trains on that form too."""
    red_plain_mapping: str = "grey"
    """Plain red rows: `grey`, the key mapped as a grey one (`wrong_path` with every segment a
    target): the teacher's weakness constructed outright, so that only the reflection tells it
    the red convention; `named`, the expert's episode (the cell the red key names)."""

    def __post_init__(self) -> None:
        for name in ("red_plain", "red_conditioned", "diagnosis_only"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(
                    f"told rows: {name}={getattr(self, name)} is not a share in [0, 1]"
                )
        if self.red_plain_mapping not in ("named", "grey"):
            raise ValueError(
                f"told rows: red_plain_mapping={self.red_plain_mapping!r}; choose named or grey"
            )
        for name in ("plain", "conditioned", "wrong_path"):
            if getattr(self, name) < 0:
                raise ValueError(f"told rows: {name}={getattr(self, name)} rows; pass a count >= 0")


@dataclass(frozen=True)
class Attempt:
    """A student rollout of one item as the critic reads it: crops, written text, answer."""

    boxes: list[tuple[int, ...]]
    text: str
    answer: str


def cell_box(sample: Sample, cell: int) -> tuple[int, ...]:
    """The box of outer cell `cell` (1..8, reading order)."""
    return tuple(sample.metadata["cell_boxes"][cell - 1])


def digit(sample: Sample, cell: int) -> str:
    """The digit outer cell `cell` shows."""
    return str(sample.metadata["digits"][cell - 1])


def attempt(sample: Sample, kind: str, rng: random.Random) -> Attempt:
    """The student rollout `kind` (one of `ATTEMPTS`) of `sample`; a wrong crop answers the
    digit it shows (the student reads what it sees)."""
    meta = sample.metadata
    key_box, target, red = tuple(meta["key_box"]), meta["target"], meta["colour"] == "red"
    if kind == "right":
        return Attempt([tuple(b) for b in keys_crops(sample)], key_note(sample), sample.answer)
    if kind == "misread":
        wrong = rng.choice([d for d in range(10) if str(d) != sample.answer])
        return Attempt([key_box, cell_box(sample, target)], key_note(sample), str(wrong))
    if kind == "mapping":
        cell = named_cell(meta["key"], not red)
        return Attempt([key_box, cell_box(sample, cell)], key_note(sample), digit(sample, cell))
    if kind == "no_key":
        cell = rng.choice([c for c in range(1, 9) if c != target])
        return Attempt([cell_box(sample, cell)], "", digit(sample, cell))
    if kind == "misnoted":
        noted = rng.choice([k for k in range(1, 9) if k != meta["key"]])
        cell = named_cell(noted, red)
        note = f"{KEY_NOTE}{noted}{RED_NOTE if red else '.'}"
        return Attempt([key_box, cell_box(sample, cell)], note, digit(sample, cell))
    raise ValueError(f"student attempt {kind!r} is not one of {ATTEMPTS}")


def break_point(sample: Sample, tried: Attempt) -> BreakPoint:
    """The first broken link the scripted critic gives `tried` (`keys_break`, its own rules)."""
    if tried.answer == sample.answer:
        return BreakPoint("CORRECT", "")
    crops = [(box, str(i)) for i, box in enumerate(tried.boxes)]
    owns = bool(covering_support(crops, sample.metadata["regions"]))
    return BreakPoint(*keys_break(sample.metadata, tried.boxes, tried.text, tried.answer, owns))


def crops_of(trajectory: Trajectory) -> tuple[str, ...]:
    """The image keys the episode's crops returned (key crop, cell crop): a correct sibling's
    support images."""
    return tuple(k for s in trajectory.segments if s.role == "observation" for k in s.images)


def reflection(
    sample: Sample, trajectory: Trajectory, found: BreakPoint, with_anchor: bool
) -> Reflection:
    """`found` with the anchor of the group's correct sibling (the expert's `trajectory`)."""
    rule = KEYS_GROUNDING[sample.metadata["kind"]]
    anchor = sibling_anchor(sample, crops_of(trajectory), rule) if with_anchor else None
    return Reflection(anchor, found)


def wrong_path(
    sample: Sample, trajectory: Trajectory, store: ImageStore, context: bool = True
) -> Trajectory:
    """The red-key `trajectory` with its key mapped as a grey one: cell k cropped (the real crop
    of that cell, stored in `store`) and the answer the digit that crop shows; with `context`,
    the prefix's generated segments are kept out of the loss (a wrong-path row), else every
    generated segment is a target (a plain row that teaches the grey mapping)."""
    meta = sample.metadata
    if meta["colour"] != "red":
        raise ValueError(f"item {sample.id}: a wrong-path row needs a red key")
    cell = meta["key"]
    right, wrong = meta["region"], cell_box(sample, cell)
    codes = [i for i, s in enumerate(trajectory.segments) if s.kind == "code"]
    observed = [i for i, s in enumerate(trajectory.segments) if s.role == "observation"]
    if len(codes) != 2 or len(observed) != 2 or len(trajectory.tool_calls) != 2:
        raise ValueError(f"item {sample.id}: not a two-crop expert episode of a `told` item")
    view = store.put(sample.images[0].crop(wrong))
    old_code, new_code = crop_code(right), crop_code(wrong)
    segments = list(trajectory.segments)
    segments[codes[1]] = replace(
        segments[codes[1]], text=segments[codes[1]].text.replace(old_code, new_code)
    )
    segments[observed[1]] = replace(segments[observed[1]], images=[view])
    answer = f"<answer>{digit(sample, cell)}</answer>"
    last = max(i for i, s in enumerate(segments) if s.role == "generated")
    segments = [
        replace(s, loss_mask=[0]) if context and s.role == "generated" and i < last else s
        for i, s in enumerate(segments)
    ]
    segments[last] = replace(segments[last], text=answer, loss_mask=[])
    call = trajectory.tool_calls[1]
    calls = [
        trajectory.tool_calls[0],
        replace(
            call,
            code=call.code.replace(old_code, new_code),
            executed_code=(call.executed_code or call.code).replace(old_code, new_code),
            images=[view],
            image_crops=[ImageCrop(0, wrong)],
        ),
    ]
    return replace(
        trajectory, segments=segments, tool_calls=calls, final_answer=digit(sample, cell)
    )


def colours(rows: int, red_share: float) -> list[str]:
    """The key colour of each of `rows` rows: red for `red_share` of them, evenly spread
    (`synth_keys.is_red`, the rule that colours the items)."""
    return ["red" if is_red(j, red_share) else "grey" for j in range(rows)]


def colour_draws(
    pools: dict[str, list[tuple[Sample, Trajectory]]], rng: random.Random
) -> dict[str, Iterator[tuple[Sample, Trajectory]]]:
    """Per colour, an endless seeded draw of its episodes: a shuffle, reshuffled per pass."""

    def draw(pool: list[tuple[Sample, Trajectory]]) -> Iterator[tuple[Sample, Trajectory]]:
        while True:
            order = list(pool)
            rng.shuffle(order)
            yield from order

    return {colour: draw(pool) for colour, pool in pools.items() if pool}


def expert_episodes(
    runs: list[Path], samples: list[Sample], store: ImageStore
) -> dict[str, list[tuple[Sample, Trajectory]]]:
    """Correct tool-mode episodes of `told` items in the eval `runs`, by key colour, their
    images copied into `store`."""
    by_key = {(s.benchmark, s.id): s for s in samples}
    pools: dict[str, list[tuple[Sample, Trajectory]]] = {"red": [], "grey": []}
    for run in runs:
        source = ImageStore(run / "images")
        for done in run_trajectories(run):
            record, trajectory = done.record, done.trajectory
            sample = by_key.get((record["benchmark"], trajectory.sample_id))
            if sample is None or sample.metadata.get("kind") != "told":
                continue
            if record["mode"] != "tool" or not record["correct"] or record.get("error"):
                continue
            copy_images(source, store, trajectory)
            pools[sample.metadata["colour"]].append((sample, trajectory))
    return pools


def build_told_rows(
    root: Path,
    runs: list[Path],
    samples: list[Sample],
    seed: int,
    position: str,
    plan: ToldPlan,
    folder: str = TOLD_DATA,
) -> dict[str, int]:
    """`root/folder/trajectories.jsonl` (`teacher-told/`): `plan`'s plain, conditioned and
    wrong-path rows
    from the expert's `told` episodes in `runs` (items: `samples`), images in `root/sft/images`
    (the SFT image store); returns counts by row kind, colour, stage, anchor and attempt, and
    the expert's episodes per colour (`pool/`)."""
    store = ImageStore(root / "sft" / "images")
    pools = expert_episodes(runs, samples, store)
    plain = colours(plan.plain, plan.red_plain)
    conditioned_colours = colours(plan.conditioned, plan.red_conditioned)
    needed = set(plain) | set(conditioned_colours) | ({"red"} if plan.wrong_path else set())
    for colour in sorted(needed):
        if not pools[colour]:
            raise ValueError(
                f"told rows: the expert runs hold no correct {colour}-key `told` episode; run "
                "the expert on `synth_keys_told` items with both key colours (red_share 0.5)"
            )
    rng = random.Random(f"demo-told:{seed}")
    draws = colour_draws(pools, rng)
    rows, counts = [], Counter[str]({f"pool/{c}": len(pool) for c, pool in pools.items()})
    for colour in plain:
        sample, trajectory = next(draws[colour])
        if colour == "red" and plan.red_plain_mapping == "grey":
            trajectory = wrong_path(sample, trajectory, store, context=False)
        rows.append(tagged(trajectory, "plain").to_json())
        counts[f"plain/{colour}"] += 1
    for colour in conditioned_colours:
        sample, trajectory = next(draws[colour])
        tried = rng.choice(ATTEMPTS)
        found = break_point(sample, attempt(sample, tried, rng))
        with_anchor = found.stage == "CORRECT" or rng.random() >= plan.diagnosis_only
        row = conditioned(
            trajectory, reflection(sample, trajectory, found, with_anchor), store, position
        )
        rows.append(tagged(row, "conditioned").to_json())
        anchor = "crops" if with_anchor else "none"
        counts[f"conditioned/{colour}"] += 1
        counts[f"conditioned/{found.stage}/{anchor}"] += 1
        counts[f"conditioned/attempt/{tried}"] += 1
    for _ in range(plan.wrong_path):
        sample, trajectory = next(draws["red"])
        prefix = attempt(sample, "mapping", rng)
        with_anchor = rng.random() >= plan.diagnosis_only
        found = break_point(sample, prefix)
        row = wrong_path(sample, trajectory, store)
        row = conditioned(row, reflection(sample, trajectory, found, with_anchor), store, position)
        rows.append(tagged(row, "wrong_path").to_json())
        counts[f"wrong_path/{found.stage}/{'crops' if with_anchor else 'none'}"] += 1
    return write_training_set(root / folder, rows, counts)


def tagged(trajectory: Trajectory, kind: str) -> Trajectory:
    """`trajectory` with its row kind in `metadata["teacher_row"]`."""
    return replace(trajectory, metadata={**trajectory.metadata, "teacher_row": kind})
