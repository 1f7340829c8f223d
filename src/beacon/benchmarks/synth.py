"""`synth`: a built-in, procedurally generated benchmark whose difficulty is known by construction.

Nothing is downloaded. Item `i` under seed `s` is drawn from `random.Random(f"synth:{s}:{i}")`,
so it is the same on every machine and independent of the other items. Five kinds cycle with
the index:

| category            | question                                   | difficulty            |
|---------------------|--------------------------------------------|-----------------------|
| `small_text`        | read a 3-character code in 10 px type      | hard (needs zoom)     |
| `large_text`        | read a 3-character code in 80-110 px type  | easy                  |
| `bar_chart`         | difference / sum of two labelled bars      | easy or hard (labels) |
| `counting`          | count shapes of one colour among others    | easy or hard (size)   |
| `relative_position` | where one object is relative to another    | easy or hard (size)   |

"hard" means the evidence is small: on the 1024x768 canvas the target text is at most about 2 %
of the image width (10 px type, ~20 px wide), so a model that sees a downscaled view (e.g. 448 px
wide) cannot read it without cropping. "easy" items are readable at any common input scale.

Each sample keeps in `metadata`: `category`, `difficulty`, `region` (x0, y0, x1, y1) of the
evidence in pixels, `regions` (one box per relevant object) and `facts` (the values the answer
is computed from), used later for expert trajectories and hints. Drawing one item takes a few
milliseconds; images are kept as PIL images (about 2.4 MB each in memory).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from beacon.benchmarks.base import Benchmark, generated_indices, register
from beacon.benchmarks.options import options_from_list
from beacon.types import AnswerType, Sample

WIDTH, HEIGHT = 1024, 768
DEFAULT_SIZE = 100
SMALL_FONT, LARGE_FONT = 10, (80, 110)
CODE_CHARS = "AEFJKLPRTVXY34679"  # narrow glyphs (10 px code <= 19 px wide), no look-alikes
COLORS = {
    "red": (220, 40, 40),
    "blue": (40, 80, 220),
    "green": (30, 160, 60),
    "orange": (240, 150, 20),
    "purple": (140, 60, 180),
}
Box = tuple[int, int, int, int]


@dataclass
class SynthItem:
    """What one generator draws: the picture, the question and the ground truth."""

    image: Image.Image
    question: str
    answer: str
    answer_type: AnswerType
    difficulty: str
    region: Box
    regions: list[Box] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    options: dict[str, str] | None = None


@lru_cache(maxsize=16)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """Pillow's bundled font (Pillow >= 10.1 scales it without any system font)."""
    return ImageFont.load_default(size=size)


def _canvas(rng: random.Random) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    shade = rng.randint(235, 255)
    image = Image.new("RGB", (WIDTH, HEIGHT), (shade, shade, shade))
    return image, ImageDraw.Draw(image)


def _clutter(draw: ImageDraw.ImageDraw, rng: random.Random, count: int) -> None:
    """Faint grey lines: texture that hides nothing but makes the canvas not blank."""
    for _ in range(count):
        x, y = rng.randrange(WIDTH), rng.randrange(HEIGHT)
        grey = rng.randint(190, 225)
        draw.line((x, y, x + rng.randint(-120, 120), y + rng.randint(-80, 80)), fill=(grey,) * 3)


def _draw_text(
    draw: ImageDraw.ImageDraw, rng: random.Random, content: str, size: int, margin: int = 20
) -> Box:
    """Draw `content` at a random spot; return its tight pixel box."""
    font = _font(size)
    left, top, right, bottom = font.getbbox(content)
    x = rng.randint(margin, WIDTH - margin - right)
    y = rng.randint(margin, HEIGHT - margin - bottom)
    draw.text((x, y), content, font=font, fill=(20, 20, 20))
    return (x + left, y + top, x + right, y + bottom)


def _code(rng: random.Random) -> str:
    return "".join(rng.choice(CODE_CHARS) for _ in range(3))


def make_text(rng: random.Random, small: bool) -> SynthItem:
    """A 3-character code somewhere on the canvas; small type needs a zoom to read."""
    image, draw = _canvas(rng)
    _clutter(draw, rng, 12)
    code = _code(rng)
    size = SMALL_FONT if small else rng.randint(*LARGE_FONT)
    box = _draw_text(draw, rng, code, size)
    return SynthItem(
        image=image,
        question="What 3-character code is written in the image?",
        answer=code,
        answer_type="text",
        difficulty="hard" if small else "easy",
        region=box,
        regions=[box],
        facts={"text": code, "font_size": size},
    )


def make_bar_chart(rng: random.Random, hard: bool) -> SynthItem:
    """Five labelled bars; the question needs two values and one subtraction or addition."""
    image, draw = _canvas(rng)
    names = rng.sample(["Ash", "Birch", "Cedar", "Elm", "Fir", "Oak", "Pine", "Yew"], 5)
    values = {name: rng.randint(5, 95) for name in names}
    label_size = SMALL_FONT if hard else 28
    x0, base, bar_w, gap = 120, 690, 110, 50
    boxes: dict[str, Box] = {}
    for i, name in enumerate(names):
        left = x0 + i * (bar_w + gap)
        top = base - values[name] * 6
        draw.rectangle((left, top, left + bar_w, base), fill=(90, 120, 200))
        value_box = _label(draw, str(values[name]), left + bar_w // 2, top - 6, label_size)
        name_box = _label(draw, name, left + bar_w // 2, base + 8 + label_size, label_size)
        boxes[name] = _union([value_box, name_box, (left, top, left + bar_w, base)])
    first, second = rng.sample(names, 2)
    if rng.random() < 0.5:
        question = f"In the bar chart, what is the value of {first} minus the value of {second}?"
        answer = values[first] - values[second]
    else:
        question = f"In the bar chart, what is the sum of the values of {first} and {second}?"
        answer = values[first] + values[second]
    pair = [boxes[first], boxes[second]]
    return SynthItem(
        image=image,
        question=question,
        answer=str(answer),
        answer_type="number",
        difficulty="hard" if hard else "easy",
        region=_union(pair),
        regions=pair,
        facts={"values": values, "pair": [first, second], "label_font_size": label_size},
    )


def _label(draw: ImageDraw.ImageDraw, content: str, center_x: int, bottom: int, size: int) -> Box:
    font = _font(size)
    left, top, right, low = font.getbbox(content)
    x = center_x - (right - left) // 2 - left
    y = bottom - low
    draw.text((x, y), content, font=font, fill=(20, 20, 20))
    return (x + left, y + top, x + right, y + low)


def _union(boxes: Iterable[Box]) -> Box:
    boxes = list(boxes)
    return (
        min(b[0] for b in boxes),
        min(b[1] for b in boxes),
        max(b[2] for b in boxes),
        max(b[3] for b in boxes),
    )


def _place(rng: random.Random, size: int, taken: list[Box], margin: int = 10) -> Box:
    """A random square box of side `size` that does not touch the boxes in `taken`."""
    for _ in range(500):
        x = rng.randint(margin, WIDTH - margin - size)
        y = rng.randint(margin, HEIGHT - margin - size)
        box = (x, y, x + size, y + size)
        if all(not _overlap(box, other, pad=4) for other in taken):
            return box
    raise RuntimeError("synth: could not place a shape without overlap; lower the shape count")


def _overlap(a: Box, b: Box, pad: int) -> bool:
    return not (a[2] + pad < b[0] or b[2] + pad < a[0] or a[3] + pad < b[1] or b[3] + pad < a[1])


def make_counting(rng: random.Random, hard: bool) -> SynthItem:
    """Count the circles of one colour among circles of other colours."""
    image, draw = _canvas(rng)
    target, *others = rng.sample(list(COLORS), 3)
    count = rng.randint(2, 9)
    size_range = (7, 10) if hard else (40, 70)
    taken: list[Box] = []
    targets: list[Box] = []
    for i in range(count + rng.randint(4, 10)):
        box = _place(rng, rng.randint(*size_range), taken)
        taken.append(box)
        color = target if i < count else rng.choice(others)
        draw.ellipse(box, fill=COLORS[color])
        if i < count:
            targets.append(box)
    return SynthItem(
        image=image,
        question=f"How many {target} circles are in the image?",
        answer=str(count),
        answer_type="number",
        difficulty="hard" if hard else "easy",
        region=_union(targets),
        regions=targets,
        facts={"color": target, "count": count, "distractors": len(taken) - count},
    )


def make_relative_position(rng: random.Random, hard: bool) -> SynthItem:
    """Where is the circle relative to the square? The separation is large on one axis."""
    image, draw = _canvas(rng)
    _clutter(draw, rng, 8)
    color_a, color_b = rng.sample(list(COLORS), 2)
    size = rng.randint(8, 12) if hard else rng.randint(60, 110)
    relation = rng.choice(["left", "right", "above", "below"])
    square = _place(rng, size, [], margin=WIDTH // 4 if relation in ("left", "right") else 230)
    shift = rng.randint(150, 220)
    dx, dy = {"left": (-shift, 0), "right": (shift, 0), "above": (0, -shift), "below": (0, shift)}[
        relation
    ]
    jitter = rng.randint(-size // 2, size // 2)
    cx = square[0] + dx + (jitter if dy else 0)
    cy = square[1] + dy + (jitter if dx else 0)
    circle = (cx, cy, cx + size, cy + size)
    draw.rectangle(square, fill=COLORS[color_b])
    draw.ellipse(circle, fill=COLORS[color_a])
    choices = ["left", "right", "above", "below"]
    options = options_from_list([f"{c} of the {color_b} square" for c in choices])
    return SynthItem(
        image=image,
        question=f"Where is the {color_a} circle relative to the {color_b} square?",
        answer="ABCD"[choices.index(relation)],
        answer_type="choice",
        difficulty="hard" if hard else "easy",
        region=_union([square, circle]),
        regions=[circle, square],
        facts={"relation": relation, "circle": color_a, "square": color_b, "size": size},
        options=options,
    )


_KINDS: tuple[tuple[str, Callable[[random.Random, bool], SynthItem]], ...] = (
    ("small_text", lambda rng, _hard: make_text(rng, small=True)),
    ("large_text", lambda rng, _hard: make_text(rng, small=False)),
    ("bar_chart", make_bar_chart),
    ("counting", make_counting),
    ("relative_position", make_relative_position),
)


def generate(seed: int, index: int) -> Sample:
    """Synth item `index` under `seed`: same inputs, same pixels and answer, everywhere."""
    rng = random.Random(f"synth:{seed}:{index}")
    category, make = _KINDS[index % len(_KINDS)]
    hard = (index // len(_KINDS)) % 2 == 1
    item = make(rng, hard)
    return Sample(
        id=str(index),
        images=[item.image],
        question=item.question,
        answer=item.answer,
        answer_type=item.answer_type,
        options=item.options,
        benchmark=Synth.name,
        metadata={
            "category": category,
            "difficulty": item.difficulty,
            "region": list(item.region),
            "regions": [list(box) for box in item.regions],
            "facts": item.facts,
            "image_size": [WIDTH, HEIGHT],
            "seed": seed,
        },
    )


@register
class Synth(Benchmark):
    name = "synth"
    description = (
        "Built-in generated items with known difficulty: small vs large text, bar-chart "
        "arithmetic, counting, relative position (no download)."
    )
    categories = tuple(kind for kind, _ in _KINDS)

    def load(
        self, path: str | Path | None = None, limit: int | None = None, seed: int = 0
    ) -> Iterator[Sample]:
        """Generate `limit` items (default 100) under `seed`; `path` is not used."""
        for index in generated_indices(self.name, path, limit, DEFAULT_SIZE):
            yield generate(seed, index)
