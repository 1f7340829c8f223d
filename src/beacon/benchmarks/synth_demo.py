"""`synth_demo`: a digit in a box, sized so a 112-pixel view decides whether cropping is needed.

The data of `beacon demo` (and nothing else): a tiny model trained from scratch on CPU sees each
448x448 image as 112x112 (16 image tokens), so a digit's height in the model's view is a
quarter of its height here. Four categories cycle with the index:

| category | glyph px (in view) | box given | difficulty | why it is there                       |
|----------|--------------------|-----------|------------|---------------------------------------|
| `large`  | 240-340 (60-85)    | yes       | easy       | readable at a glance                  |
| `small`  | 64-96 (16-24)      | yes       | easy       | small but readable: not "big glyph"   |
| `tiny`   | 14-22 (3-5)        | yes       | hard       | unreadable uncropped; half: decoy     |
| `search` | 20-28 (5-7)        | no        | hard       | must find the box; hint names where   |

`tiny` items carry, half the time, a large unboxed *decoy* digit elsewhere, so "a large digit is
visible" does not mean "no crop needed". `search` items ask about "the box" without
coordinates: a crop needs the box's place, which the 112-pixel view shows only as a small
coloured outline. Their answer-free hint (`metadata["hint"]`, used by HGCE) names the ninth of
the image holding the box ("the top left"): it says where to crop, not what the digit is. A
crop of that ninth, seen at 112 pixels, shows the digit 15-21 pixels tall, about a `small`
item's size; whether a model then reads it is its own skill, and the demo's shipped cold start
does not (it reads the digit in the hinted crop at chance: `benchmarks/demo_hint_crops.py`).

Coordinates in questions and hints are written three characters wide, padded with spaces
(`( 12,345, 67, 89)`): valid Python when copied into `image.crop((...))`, and the same
fixed-offset copy for every number (a tokenizer that splits digits sees three tokens each).

Item `i` under seed `s` comes from `random.Random(f"synth_demo:{s}:{i}")`; Pillow's bundled
font (the same on every machine) draws the digits.
"""

from __future__ import annotations

import multiprocessing
import random
from collections.abc import Callable, Hashable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from beacon.benchmarks.base import Benchmark, generated_indices, register
from beacon.blocks import NestedBlocks
from beacon.types import Sample

SIZE = 448
VIEW = 112  # the demo model's input side; glyph sizes above are chosen against it
DEFAULT_SIZE = 200
CATEGORIES = ("large", "small", "tiny", "search")
GLYPH_PX = {"large": (240, 340), "small": (64, 96), "tiny": (14, 22), "search": (20, 28)}
MARGIN_PX = {"large": (8, 24), "small": (6, 16), "tiny": (4, 10), "search": (4, 10)}
DIFFICULTY = {"large": "easy", "small": "easy", "tiny": "hard", "search": "hard"}
BOX_COLORS = ((200, 30, 30), (30, 60, 200), (20, 140, 40))
ROWS, COLS = ("top", "middle", "bottom"), ("left", "centre", "right")
Box = tuple[int, int, int, int]


def coords(box: Box) -> str:
    """`( 12,345, 67, 89)`: each number three characters wide, so copies are fixed-offset."""
    return "(" + ",".join(f"{v:3d}" for v in box) + ")"


def cell_box(row: int, col: int) -> Box:
    """Pixel box of the grid cell (row, col) of the 3x3 grid over the image."""
    step = SIZE / 3
    return (round(col * step), round(row * step), round((col + 1) * step), round((row + 1) * step))


def cell_name(row: int, col: int) -> str:
    """The words for a 3x3 grid cell (`the top left`, `the centre`): region hints name places in
    words, never coordinates that could hold the answer's digits."""
    if (row, col) == (1, 1):
        return "the centre"
    if row == 1:
        return f"the middle {COLS[col]}"
    if col == 1:
        return f"the {ROWS[row]} centre"
    return f"the {ROWS[row]} {COLS[col]}"


def region_hint(cell: tuple[int, int]) -> str:
    """The answer-free hint of a search item: which ninth of the image holds the box."""
    return f"The box is in {cell_name(*cell)} of the image."


@lru_cache(maxsize=64)
def font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """Pillow's bundled font at `size` (the same on every machine)."""
    return ImageFont.load_default(size=size)


def glyph(digit: int, height: int, color: tuple[int, int, int], angle: float) -> Image.Image:
    """The digit drawn `height` pixels tall on a transparent layer, rotated by `angle`."""
    probe = font(100).getbbox(str(digit))
    size = max(4, round(100 * height / max(1, probe[3] - probe[1])))
    face = font(size)
    left, top, right, bottom = face.getbbox(str(digit))
    layer = Image.new("RGBA", (right - left + 4, bottom - top + 4), (0, 0, 0, 0))
    ImageDraw.Draw(layer).text((2 - left, 2 - top), str(digit), font=face, fill=(*color, 255))
    rotated = layer.rotate(angle, resample=Image.BICUBIC, expand=True)
    return rotated.crop(rotated.getbbox() or (0, 0, 1, 1))


def background(rng: random.Random) -> np.ndarray:
    """The noisy grey canvas, float RGB (`SIZE` x `SIZE` x 3): clip and cast before drawing."""
    shade = rng.randint(205, 245)
    tint = np.array([shade + rng.randint(-8, 8) for _ in range(3)], dtype=np.float32)
    noise = np.random.default_rng(rng.randrange(2**32)).normal(0, 9, (SIZE, SIZE, 3))
    return tint + noise.astype(np.float32)


def _place(rng: random.Random, w: int, h: int, avoid: Box | None, inside: Box | None) -> Box:
    """A box of w x h inside the canvas (and inside `inside`), not touching `avoid`."""
    lo_x, lo_y, hi_x, hi_y = inside or (0, 0, SIZE, SIZE)
    for _ in range(200):
        x = rng.randint(lo_x + 2, max(lo_x + 2, hi_x - w - 2))
        y = rng.randint(lo_y + 2, max(lo_y + 2, hi_y - h - 2))
        box = (x, y, x + w, y + h)
        if avoid is None or not _overlap(box, avoid):
            return box
    return box


def _overlap(a: Box, b: Box) -> bool:
    return not (a[2] + 6 < b[0] or b[2] + 6 < a[0] or a[3] + 6 < b[1] or b[3] + 6 < a[1])


_blocks: NestedBlocks[dict[tuple[Hashable, ...], Sample]] = NestedBlocks(dict)  # `render_once`'s


@contextmanager
def render_once() -> Iterator[None]:
    """Within the block, `generate` renders each item once and returns that same `Sample` when
    asked again (all three `synth_demo` benchmarks go through it, and the `synth_keys` ones:
    their keys, `(seed, index, kind, red_share)`, never equal a `(seed, index)` pair).

    Rendering an item takes ~17 ms (mostly the background noise). The demo's data stage loads
    its training items three times (to index them, then in two eval runs): ~12,400 renders where
    4,200 do. Its later stages load the same ~600 held-out, RL and OPD items once per stage,
    ~30 stages. A block's samples stay in memory until it ends. A block opened inside another
    keeps its own items and drops them at its end; meanwhile the outer block's items are not
    used (so the data stage's 4,200 training items, ~2.5 GB, live only as long as that stage).
    A returned image must not be changed in place (loaders copy).
    """
    with _blocks.block():
        yield


def prerender(
    keys: Iterable[tuple[Hashable, ...]],
    processes: int,
    render: Callable[..., Sample] | None = None,
) -> None:
    """Render the items `keys` (`render`'s arguments: `synth_demo`'s (seed, index) pairs by
    default) into the innermost `render_once` block, `processes` at a time, so its later
    `generate` calls find them rendered.

    Rendering is CPU work under the GIL: the demo's 4,200 training items take ~75 s in one
    process. A spawn pool of `processes` renders them side by side (items are the same on
    every machine, so who renders one does not matter); fewer than `_POOL_MIN` missing items,
    or one process, render here, since a pool takes a second or two to start. `render` must be
    a module-level function (the pool pickles it by name).
    """
    render = render or _generate
    memo = _blocks.innermost()
    if memo is None:
        raise RuntimeError("prerender() fills a render_once() block; open one first")
    missing = [key for key in dict.fromkeys(keys) if key not in memo]
    if processes <= 1 or len(missing) < max(1, _POOL_MIN):
        rendered = [render(*key) for key in missing]
    else:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(processes, mp_context=context) as pool:
            rendered = list(pool.map(render, *zip(*missing, strict=True), chunksize=32))
    for key, sample in zip(missing, rendered, strict=True):
        memo.setdefault(key, sample)  # as `generate` does: a concurrent render may be there


_POOL_MIN = 256


def generate(seed: int, index: int) -> Sample:
    """Item `index` under `seed`: the same pixels, question and answer on every machine."""
    return memoized((seed, index), _generate)


def memoized(key: tuple[Hashable, ...], render: Callable[..., Sample]) -> Sample:
    """`render(*key)`, rendered once per innermost `render_once` block (every call outside one).
    Keys of different generators must differ (in length or in the type of an element)."""
    memo = _blocks.innermost()
    if memo is None:
        return render(*key)
    sample = memo.get(key)
    if sample is None:
        sample = memo.setdefault(key, render(*key))
    return sample


def _generate(seed: int, index: int) -> Sample:
    rng = random.Random(f"synth_demo:{seed}:{index}")
    category = CATEGORIES[index % len(CATEGORIES)]
    digit = rng.randrange(10)
    ink = tuple(rng.randint(0, 70) for _ in range(3))
    mark = glyph(digit, rng.randint(*GLYPH_PX[category]), ink, rng.uniform(-10, 10))
    margin = rng.randint(*MARGIN_PX[category])
    w, h = mark.width + 2 * margin, mark.height + 2 * margin
    cell = (rng.randrange(3), rng.randrange(3))
    inside = cell_box(*cell) if category == "search" else None
    box = _place(rng, w, h, None, inside)
    canvas = Image.fromarray(np.clip(background(rng), 0, 255).astype(np.uint8))
    canvas.paste(mark, (box[0] + margin, box[1] + margin), mark)
    decoy = None
    if category == "tiny" and rng.random() < 0.5:
        decoy_digit = (digit + rng.randint(1, 9)) % 10
        decoy_glyph = glyph(decoy_digit, rng.randint(120, 180), ink, rng.uniform(-10, 10))
        decoy_box = _place(rng, decoy_glyph.width, decoy_glyph.height, box, None)
        canvas.paste(decoy_glyph, decoy_box[:2], decoy_glyph)
        decoy = {"digit": decoy_digit, "box": list(decoy_box)}
    draw = ImageDraw.Draw(canvas)
    draw.rectangle(box, outline=rng.choice(BOX_COLORS), width=rng.randint(1, 2))
    if category == "search":
        question = "What digit is inside the box?"
    else:
        question = f"What digit is inside the box at {coords(box)}?"
    metadata = {
        "category": category,
        "difficulty": DIFFICULTY[category],
        "region": list(box),
        "regions": [list(box)],
        "facts": {"digit": digit, "decoy": None if decoy is None else decoy["digit"]},
        "glyph_px": mark.height,
        "decoy": decoy,
        "image_size": [SIZE, SIZE],
        "seed": seed,
    }
    if category == "search":
        metadata["hint"] = region_hint(cell)
        metadata["cell"] = list(cell_box(*cell))
    return Sample(
        id=str(index),
        images=[canvas],
        question=question,
        answer=str(digit),
        answer_type="number",
        benchmark=SynthDemo.name,
        metadata=metadata,
    )


@register
class SynthDemo(Benchmark):
    """Registered as `synth_demo`: the demo's generated digit items, whose difficulty is known by
    design, so mode adaptiveness can be measured without a download."""

    name = "synth_demo"
    description = (
        "Built-in digit-in-a-box items for `beacon demo`: large and small readable digits, "
        "tiny ones (some with a decoy) and boxes to search for, with region hints (no download)."
    )
    categories = CATEGORIES

    def load(
        self, path: str | Path | None = None, limit: int | None = None, seed: int = 0
    ) -> Iterator[Sample]:
        """Generate `limit` items (default 200) under `seed`; `path` is not used."""
        for key in self.item_keys(limit, seed, path):
            yield generate(*key)

    def item_keys(
        self, limit: int | None = None, seed: int = 0, path: str | Path | None = None
    ) -> list[tuple[int, int]]:
        """The (seed, index) of each item `load` yields, for `prerender`."""
        return [(seed, i) for i in generated_indices(self.name, path, limit, DEFAULT_SIZE)]


HINTED = "synth_demo_hinted"


def hinted(sample: Sample, benchmark: str = HINTED) -> Sample:
    """An item whose question carries its `metadata["hint"]`, worded as the agent's hinted mode
    does, as an item of `benchmark`."""
    question = f"{sample.question}\n\nHint: {sample.metadata['hint']}"
    meta = {**sample.metadata, "hinted": True}
    return replace(sample, question=question, metadata=meta, benchmark=benchmark)


@register
class SynthDemoHinted(Benchmark):
    """Registered as `synth_demo_hinted`: search items with the region hint written into the
    question, the demo's SFT data for learning to follow a hint."""

    name = HINTED
    description = (
        "`synth_demo` search items with their region hint in the question: demo SFT data that "
        "teaches a from-scratch model to follow a hint, as a pretrained model would (no download)."
    )
    categories = ("search",)

    def load(
        self, path: str | Path | None = None, limit: int | None = None, seed: int = 0
    ) -> Iterator[Sample]:
        """Generate `limit` hinted search items (default 50) under `seed`; `path` is not used."""
        for index, key in enumerate(self.item_keys(limit, seed, path)):
            yield replace(hinted(generate(*key)), id=str(index))

    def item_keys(
        self, limit: int | None = None, seed: int = 0, path: str | Path | None = None
    ) -> list[tuple[int, int]]:
        """The (seed, index) of the `synth_demo` search item behind each hinted item."""
        search = CATEGORIES.index("search")
        indices = generated_indices(self.name, path, limit, DEFAULT_SIZE // len(CATEGORIES))
        return [(seed, i * len(CATEGORIES) + search) for i in indices]


RL_MIX = ("large", "tiny", "large", "search")
"""Categories of `synth_demo_rl` items, cycling: readable-at-a-glance items half the time."""


@register
class SynthDemoRL(Benchmark):
    """Registered as `synth_demo_rl`: the RL stage's item mix, with no `small` items so held-out
    ones test whether the tool decision transfers."""

    name = "synth_demo_rl"
    description = (
        "`synth_demo` items for the demo's RL stage: large, tiny, large, search, cycling (no "
        "`small` items, so held-out `small` items show whether a learned decision transfers)."
    )
    categories = tuple(dict.fromkeys(RL_MIX))

    def load(
        self, path: str | Path | None = None, limit: int | None = None, seed: int = 0
    ) -> Iterator[Sample]:
        """Generate `limit` items (default 200) under `seed`; `path` is not used."""
        for index in generated_indices(self.name, path, limit, DEFAULT_SIZE):
            yield replace(rl_item(seed, index), id=str(index), benchmark=self.name)


def rl_item(seed: int, index: int) -> Sample:
    """Item `index` of `synth_demo_rl` under `seed`: the `synth_demo` item of its `RL_MIX`
    category at that place."""
    category = CATEGORIES.index(RL_MIX[index % len(RL_MIX)])
    return generate(seed, index * len(CATEGORIES) + category)
