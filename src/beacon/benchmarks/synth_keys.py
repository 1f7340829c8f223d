"""`synth_keys`: a 3x3 grid of digit boxes where a key box names the cell to read.

The second task of `beacon demo` (design: `../shared/research/demo2_design.md` §2), built so the
answer needs an intermediate decision: which cell to crop. Every image is a 448x448 grid of
149-pixel cells (`synth_demo.cell_box`), each holding one **fixed** 40x48 box centred in its
cell and outlined 2 px, so every crop a trajectory makes is one of 9 coordinate strings
(`synth_demo.coords`). One box is the **key**: a single digit `k` in 1..8, in grey ink (or red,
below). The other eight hold eight **distinct** digits (a wrong cell always gives a wrong
answer), 26-32 px tall: unreadable in the model's 112-pixel full view (6.5-8 px there), readable
in a tight crop. Background, noise, ink, font and rotation are `synth_demo`'s.

**Reading order.** The eight outer cells are numbered 1..8 left to right, top to bottom,
skipping the key's cell. The key digit `k` names cell `k`. Two layouts keep the two tests apart:

| layout | key cell         | kinds             | cells 1..8 as (row, col)                        |
|--------|------------------|-------------------|-------------------------------------------------|
| C      | (1, 1): centre   | `marked`, `keyed` | (0,0) (0,1) (0,2) (1,0) (1,2) (2,0) (2,1) (2,2) |
| K      | (0, 0): top left | `told`            | (0,1) (0,2) (1,0) (1,1) (1,2) (2,0) (2,1) (2,2) |

**Kinds.** `marked` and `keyed` ask `MARKED_QUESTION`; `told` asks `TOLD_QUESTION`, which states
that the key names the cell.

- `marked`: the target is the cell in an orange 5 px frame (14 px outside its box); the key is a
  **decoy** naming another cell, so "a key is present" does not mean "crop the key". The demo's
  tiny model barely uses the frame (it crops the framed cell near chance after training:
  benchmarks/RESULTS.md), and that is what its part needs: `marked` and unhinted `keyed`
  prompts read the same to the model, so its unhinted default on `keyed` is a guessed cell and
  only rare rows teach it to crop the key. Naming the cell in the question instead ("Marked:
  cell 5.") made `marked` items easy (1.00) but key-first the default on `keyed` (0.99
  unhinted), leaving HGCE nothing to do.
- `keyed`: the target is cell `k`, with no frame: the key is the only way to it (HGCE's item;
  `metadata["hint"]` is `KEYED_HINT`).
- `told`: the target is cell `k`, but a **red** key counts from the other end: cell `9 - k`
  (ReVuE's item: a grounding rule the question does not state).

`told` keys are red for a share `red_share` of the items (0.5 in the registered benchmarks),
spread evenly: item `j` is red when `floor((j + 1) * red_share) > floor(j * red_share)`, so any
run of items holds the share to within one item, and a lower share keeps every other item as it
was. The key box's outline is never red, so "red in the key crop" means a red key.

Item `index` of a kind under `seed` comes from `random.Random(f"synth_keys:{kind}:{seed}:{index}")`
(the red decision only recolours the key and moves the target), so it is the same on every
machine. `metadata` holds `kind`, `layout`, `key` (k), `colour` (`grey` / `red`), `target` (its
cell number, 1..8), `named` (the cell the key names under the item's convention: the target,
except for `marked`, where it is the decoy's), `key_box`, `cell_boxes` and `digits` (cells
1..8 in reading order), `region` (the target's box) and `regions` (the evidence a scripted critic
needs: [key box, target box]; `marked`: [target box]) and, for `keyed` and `told`, `decision_box`
(the key box: cropping it first is the decision GRPO's `rl/decision_rate` follows). The answer is
the target's digit.

Besides the three kinds (and the mix, `synth_keys`), two sets are registered for the demo:
`synth_keys_rl` (GRPO's mix: `synth_demo` large and tiny items beside `keyed` and `marked` ones)
and `synth_keys_opd` (OPD's pool: `told` items, half red, alternating with one-hop
`synth_demo_rl` items).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from PIL import Image, ImageDraw

from beacon.benchmarks import synth_demo
from beacon.benchmarks.base import Benchmark, generated_indices, register
from beacon.benchmarks.synth_demo import (
    BOX_COLORS,
    SIZE,
    Box,
    background,
    cell_box,
    glyph,
    hinted,
    memoized,
)
from beacon.types import Sample

KINDS = ("marked", "keyed", "told")
LAYOUT = {"marked": "C", "keyed": "C", "told": "K"}
KEY_CELL = {"C": (1, 1), "K": (0, 0)}
BOX_W, BOX_H = 40, 48
GLYPH_PX = (26, 32)
KEY_INK = (60, 110)  # grey level of a plain key's digit
RED_INK = ((230, 250), (95, 125), (95, 125))
"""RGB ranges of a red key's digit: a light red, luminance 135-162 against grey ink's 60-110.
A deep red (luminance 71-104) differed from grey ink in hue alone, and the demo's tiny model
did not learn to tell them apart: after 1,600 SFT steps with half its `told` rows noting a red
key, it wrote the note " red." as often on grey keys as on red ones (benchmarks/RESULTS.md)."""
KEY_OUTLINES = tuple(c for c in BOX_COLORS if c != (200, 30, 30))  # blue, green: never red
FRAME_COLOR = (240, 140, 20)
FRAME_GAP, FRAME_WIDTH = 14, 5
RED_SHARE = 0.5
DEFAULT_SIZE = 120
MARKED_QUESTION = "What digit is in the marked cell?"
TOLD_QUESTION = "The key in the corner names a cell. What digit is in that cell?"
KEYED_HINT = "No cell is framed: the key in the centre names the marked cell. Crop the key first."
UNINFORMATIVE_HINT = "Look at the image carefully before you answer."
"""The HGCE control arm's hint: answer-free like `KEYED_HINT`, but it names no procedure."""


def grid_box(row: int, col: int) -> Box:
    """The fixed 40x48 box centred in grid cell (row, col): the only boxes a crop names."""
    x0, y0, x1, y1 = cell_box(row, col)
    cx, cy = (x0 + x1) // 2, (y0 + y1) // 2
    return (cx - BOX_W // 2, cy - BOX_H // 2, cx + BOX_W // 2, cy + BOX_H // 2)


def outer_cells(layout: str) -> list[tuple[int, int]]:
    """Cells 1..8 of `layout` (index 0 is cell 1): reading order, skipping the key's cell."""
    return [(r, c) for r in range(3) for c in range(3) if (r, c) != KEY_CELL[layout]]


def is_red(index: int, red_share: float) -> bool:
    """Whether `told` item `index` has a red key: spread evenly at `red_share` (module doc)."""
    return int((index + 1) * red_share) > int(index * red_share)


def named_cell(key: int, red: bool) -> int:
    """The cell a key names: `k`, or `9 - k` for a red key (it counts from the other end)."""
    return 9 - key if red else key


def generate(seed: int, index: int, kind: str, red_share: float = RED_SHARE) -> Sample:
    """Item `index` of `kind` under `seed`, rendered once per `synth_demo.render_once` block."""
    if kind not in KINDS:
        raise ValueError(f"synth_keys kind {kind!r} is not one of {', '.join(KINDS)}")
    if not 0.0 <= red_share <= 1.0:
        raise ValueError(f"red_share={red_share} is not a share; pass a value in [0, 1]")
    return memoized((seed, index, kind, red_share), _generate)


def prerender(keys: list[tuple[int, int, str, float]], processes: int) -> None:
    """`synth_demo.prerender` for `synth_keys` items (keys from `item_keys`)."""
    synth_demo.prerender(keys, processes, render=_generate)


def _generate(seed: int, index: int, kind: str, red_share: float) -> Sample:
    rng = random.Random(f"synth_keys:{kind}:{seed}:{index}")
    layout = LAYOUT[kind]
    cells = outer_cells(layout)
    digits = rng.sample(range(10), len(cells))
    key = rng.randint(1, len(cells))
    red = kind == "told" and is_red(index, red_share)
    decoy = None
    if kind == "marked":  # the framed cell is the target; the key names another one
        target = rng.choice([c for c in range(1, len(cells) + 1) if c != key])
        decoy = key
    else:
        target = named_cell(key, red)
    canvas = Image.fromarray(np.clip(background(rng), 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(canvas)
    key_box = grid_box(*KEY_CELL[layout])
    boxes = [grid_box(*cell) for cell in cells]
    for digit, box in zip(digits, boxes, strict=True):
        ink = (rng.randint(0, 70), rng.randint(0, 70), rng.randint(0, 70))
        _draw_box(canvas, draw, rng, box, digit, ink, BOX_COLORS)
    grey = rng.randint(*KEY_INK)
    red_ink = (rng.randint(*RED_INK[0]), rng.randint(*RED_INK[1]), rng.randint(*RED_INK[2]))
    key_ink = red_ink if red else (grey, grey, grey)  # both drawn: red changes nothing else
    _draw_box(canvas, draw, rng, key_box, key, key_ink, KEY_OUTLINES)
    metadata: dict[str, Any] = {"frame": None}
    if kind == "marked":
        x0, y0, x1, y1 = boxes[target - 1]
        pad = FRAME_GAP + FRAME_WIDTH
        frame = (x0 - pad, y0 - pad, x1 + pad, y1 + pad)
        draw.rectangle(frame, outline=FRAME_COLOR, width=FRAME_WIDTH)
        metadata["frame"] = list(frame)
    target_box = list(boxes[target - 1])
    answer = digits[target - 1]
    metadata |= {
        "category": kind,
        "difficulty": "hard",
        "kind": kind,
        "layout": layout,
        "key": key,
        "colour": "red" if red else "grey",
        "target": target,
        "named": decoy if decoy is not None else target,
        "key_box": list(key_box),
        "cell_boxes": [list(b) for b in boxes],
        "digits": digits,
        "region": target_box,
        "regions": [target_box] if kind == "marked" else [list(key_box), target_box],
        "facts": {"key": key, "colour": "red" if red else "grey", "cell": target, "digit": answer},
        "image_size": [SIZE, SIZE],
        "seed": seed,
    }
    if kind != "marked":  # the key is the decisive first crop (`rl/decision_rate`)
        metadata["decision_box"] = list(key_box)
    if kind == "keyed":
        metadata["hint"] = KEYED_HINT
    return Sample(
        id=str(index),
        images=[canvas],
        question=TOLD_QUESTION if kind == "told" else MARKED_QUESTION,
        answer=str(answer),
        answer_type="number",
        benchmark=f"{SynthKeys.name}_{kind}",
        metadata=metadata,
    )


def _draw_box(
    canvas: Image.Image,
    draw: ImageDraw.ImageDraw,
    rng: random.Random,
    box: Box,
    digit: int,
    ink: tuple[int, int, int],
    outlines: tuple[tuple[int, int, int], ...],
) -> None:
    """A digit 26-32 px tall, rotated up to 10 degrees, centred in `box`, then its outline."""
    mark = glyph(digit, rng.randint(*GLYPH_PX), ink, rng.uniform(-10, 10))
    cx, cy = (box[0] + box[2]) // 2, (box[1] + box[3]) // 2
    canvas.paste(mark, (cx - mark.width // 2, cy - mark.height // 2), mark)
    draw.rectangle(box, outline=rng.choice(outlines), width=2)


@register
class SynthKeys(Benchmark):
    """Registered as `synth_keys`: `marked`, `keyed` and `told` items, cycling (item `i` is item
    `i // 3` of its kind's benchmark, so the mix and the per-kind sets hold the same items)."""

    name = "synth_keys"
    description = (
        "Built-in 3x3 digit grids with a key box naming the cell to read: framed (`marked`), "
        "key-only (`keyed`) and stated-procedure (`told`, half with a red key that counts from "
        "the end) items, cycling (no download)."
    )
    categories = KINDS
    kinds: ClassVar[tuple[str, ...]] = KINDS

    def __init__(self, red_share: float = RED_SHARE) -> None:
        super().__init__()
        self.red_share = red_share

    def load(
        self, path: str | Path | None = None, limit: int | None = None, seed: int = 0
    ) -> Iterator[Sample]:
        """Generate `limit` items (default 120) under `seed`; `path` is not used."""
        for number, key in enumerate(self.item_keys(limit, seed, path)):
            yield replace(generate(*key), id=str(number), benchmark=self.name)

    def item_keys(
        self, limit: int | None = None, seed: int = 0, path: str | Path | None = None
    ) -> list[tuple[int, int, str, float]]:
        """The (seed, index, kind, red_share) of each item `load` yields, for `prerender`."""
        kinds = self.kinds
        indices = generated_indices(self.name, path, limit, DEFAULT_SIZE)
        return [(seed, i // len(kinds), kinds[i % len(kinds)], self.red_share) for i in indices]


@register
class SynthKeysMarked(SynthKeys):
    """Registered as `synth_keys_marked`: framed-target items with a decoy key (layout C)."""

    name = "synth_keys_marked"
    description = "`synth_keys` items whose target cell is framed; the key is a decoy."
    categories = kinds = ("marked",)


@register
class SynthKeysKeyed(SynthKeys):
    """Registered as `synth_keys_keyed`: no frame, the centre key names the target (HGCE's
    items; `metadata["hint"]` is `KEYED_HINT`)."""

    name = "synth_keys_keyed"
    description = "`synth_keys` items with no frame: the key in the centre names the target."
    categories = kinds = ("keyed",)


@register
class SynthKeysTold(SynthKeys):
    """Registered as `synth_keys_told`: the question states the key; `red_share` of the keys
    are red and count from the end (ReVuE's items)."""

    name = "synth_keys_told"
    description = (
        "`synth_keys` items whose question says the corner key names the cell; half the keys "
        "are red and name cell 9 - k."
    )
    categories = kinds = ("told",)


KEYED_HINTED = "synth_keys_keyed_hinted"


@register
class SynthKeysKeyedHinted(SynthKeysKeyed):
    """Registered as `synth_keys_keyed_hinted`: `keyed` items with `KEYED_HINT` written into the
    question (the demo's SFT data for following the procedural hint; `synth_demo_hinted`'s
    wording)."""

    name = KEYED_HINTED
    description = (
        "`synth_keys_keyed` items with the procedural hint (crop the key first) in the question."
    )

    def load(
        self, path: str | Path | None = None, limit: int | None = None, seed: int = 0
    ) -> Iterator[Sample]:
        """Generate `limit` hinted `keyed` items (default 120) under `seed`; `path` is not used."""
        for number, key in enumerate(self.item_keys(limit, seed, path)):
            yield replace(hinted(generate(*key), self.name), id=str(number))


def uninformative_hint_rows(samples: list[Sample]) -> list[dict[str, str]]:
    """HGCE hint-cache rows (`rollout.hints`, which wins over `metadata["hint"]`) giving every
    item `UNINFORMATIVE_HINT`: the control arm's same machinery without the procedure."""
    return [
        {"benchmark": s.benchmark, "sample_id": s.id, "hint": UNINFORMATIVE_HINT} for s in samples
    ]


RL_MIX = ("large", "tiny", "large", "keyed", "marked", "keyed")
"""Kinds of `synth_keys_rl` items, cycling: the demo's GRPO mix (design §2.6). `search` is not in
it (no stage learns it); `keyed` items are HGCE's, `marked` ones show an over-applied key-first."""


@register
class SynthKeysRL(Benchmark):
    """Registered as `synth_keys_rl`: `beacon demo`'s GRPO items, `RL_MIX` cycling (`synth_demo`
    items of a category, `synth_keys` items of a kind, each under the same seed)."""

    name = "synth_keys_rl"
    description = (
        "`beacon demo`'s GRPO mix: synth_demo large and tiny items, synth_keys keyed and marked "
        "items, cycling (no download)."
    )
    categories = tuple(dict.fromkeys(RL_MIX))

    def load(
        self, path: str | Path | None = None, limit: int | None = None, seed: int = 0
    ) -> Iterator[Sample]:
        """Generate `limit` items (default 120) under `seed`; `path` is not used. Item `i` is
        the next unused item of its category or kind (`large` 0, 1, ... at slots 0, 2, ...)."""
        for index in generated_indices(self.name, path, limit, DEFAULT_SIZE):
            rounds, slot = divmod(index, len(RL_MIX))
            kind = RL_MIX[slot]
            number = rounds * RL_MIX.count(kind) + RL_MIX[:slot].count(kind)
            if kind in KINDS:
                sample = generate(seed, number, kind)
            else:
                category = synth_demo.CATEGORIES.index(kind)
                sample = synth_demo.generate(seed, number * len(synth_demo.CATEGORIES) + category)
            yield replace(sample, id=str(index), benchmark=self.name)


@register
class SynthKeysOPD(Benchmark):
    """Registered as `synth_keys_opd`: `beacon demo`'s OPD pool, `told` items (half red)
    alternating with one-hop `synth_demo_rl` items, each under the same seed."""

    name = "synth_keys_opd"
    description = (
        "`beacon demo`'s OPD pool: synth_keys told items (half with a red key) alternating "
        "with synth_demo_rl items (no download)."
    )
    categories = ("told", *dict.fromkeys(synth_demo.RL_MIX))

    def load(
        self, path: str | Path | None = None, limit: int | None = None, seed: int = 0
    ) -> Iterator[Sample]:
        """Generate `limit` items (default 120) under `seed`; `path` is not used. Even items are
        `told` items 0, 1, ...; odd ones `synth_demo_rl` items 0, 1, ..."""
        for index in generated_indices(self.name, path, limit, DEFAULT_SIZE):
            number, odd = divmod(index, 2)
            sample = synth_demo.rl_item(seed, number) if odd else generate(seed, number, "told")
            yield replace(sample, id=str(index), benchmark=self.name)
