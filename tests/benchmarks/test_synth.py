"""`synth`: deterministic per (seed, index), difficulty real by construction, facts consistent."""

from __future__ import annotations

import numpy as np

from beacon.benchmarks import get_benchmark
from beacon.benchmarks.synth import HEIGHT, WIDTH, generate

N = 40  # eight of each of the five kinds


def pixels(sample) -> bytes:
    return sample.images[0].tobytes()


def test_same_seed_same_items_other_seed_other_items() -> None:
    bench = get_benchmark("synth")
    first = list(bench.load(limit=N, seed=3))
    again = list(bench.load(limit=N, seed=3))
    other = list(bench.load(limit=N, seed=4))
    assert [(s.question, s.answer, pixels(s)) for s in first] == [
        (s.question, s.answer, pixels(s)) for s in again
    ]
    assert sum(pixels(a) != pixels(b) for a, b in zip(first, other, strict=True)) == N


def test_item_depends_only_on_seed_and_index() -> None:
    loaded = list(get_benchmark("synth").load(limit=12, seed=7))
    alone = generate(7, 11)
    assert (alone.answer, pixels(alone)) == (loaded[11].answer, pixels(loaded[11]))
    assert len(list(get_benchmark("synth").load())) == 100


def test_every_kind_and_both_difficulties_appear() -> None:
    samples = list(get_benchmark("synth").load(limit=N))
    kinds = {(s.metadata["category"], s.metadata["difficulty"]) for s in samples}
    assert kinds == {
        ("small_text", "hard"),
        ("large_text", "easy"),
        ("bar_chart", "easy"),
        ("bar_chart", "hard"),
        ("counting", "easy"),
        ("counting", "hard"),
        ("relative_position", "easy"),
        ("relative_position", "hard"),
    }


def test_hard_text_is_small_and_easy_text_is_large() -> None:
    samples = list(get_benchmark("synth").load(limit=N, seed=1))
    for sample in samples:
        x0, y0, x1, y1 = sample.metadata["region"]
        assert 0 <= x0 < x1 <= WIDTH and 0 <= y0 < y1 <= HEIGHT
        if sample.metadata["category"] == "small_text":
            assert x1 - x0 <= 0.02 * WIDTH  # unreadable once the image is downscaled
        if sample.metadata["category"] == "large_text":
            assert y1 - y0 >= 0.05 * HEIGHT


def test_region_holds_the_drawn_evidence() -> None:
    for sample in get_benchmark("synth").load(limit=10, seed=2):
        image = np.asarray(sample.images[0].convert("L"))
        x0, y0, x1, y1 = sample.metadata["region"]
        inside = image[y0:y1, x0:x1]
        assert inside.min() < 180, f"{sample.id}: nothing drawn in the ground-truth region"


def test_facts_agree_with_answers() -> None:
    for sample in get_benchmark("synth").load(limit=N, seed=5):
        facts = sample.metadata["facts"]
        kind = sample.metadata["category"]
        if kind in ("small_text", "large_text"):
            assert sample.answer == facts["text"]
        elif kind == "bar_chart":
            first, second = (facts["values"][name] for name in facts["pair"])
            expected = first - second if "minus" in sample.question else first + second
            assert sample.answer == str(expected)
        elif kind == "counting":
            assert int(sample.answer) == facts["count"] == len(sample.metadata["regions"])
        else:
            circle, square = sample.metadata["regions"]
            dx = (circle[0] + circle[2] - square[0] - square[2]) / 2
            dy = (circle[1] + circle[3] - square[1] - square[3]) / 2
            seen = (
                ("left" if dx < 0 else "right")
                if abs(dx) > abs(dy)
                else ("above" if dy < 0 else "below")
            )
            assert seen == facts["relation"]
            assert sample.options[sample.answer].startswith(seen)
