"""`synth_demo`: deterministic items whose difficulty is decided by size, clutter and search."""

from __future__ import annotations

import ast
import re

import numpy as np
import pytest

from beacon.benchmarks import get_benchmark, synth_demo
from beacon.benchmarks.synth_demo import (
    CATEGORIES,
    DIFFICULTY,
    HINTED,
    SIZE,
    cell_box,
    coords,
    generate,
    hinted,
    render_once,
)
from beacon.train.grpo.hints import check_hint

BOX = re.compile(r"\((\s*\d+,){3}\s*\d+\)")


def contains(outer: list[int] | tuple[int, ...], inner: list[int] | tuple[int, ...]) -> bool:
    return (
        outer[0] <= inner[0]
        and outer[1] <= inner[1]
        and inner[2] <= outer[2]
        and inner[3] <= outer[3]
    )


def test_coords_are_three_wide_and_valid_python() -> None:
    assert coords((5, 42, 300, 447)) == "(  5, 42,300,447)"
    assert ast.literal_eval(coords((5, 42, 300, 447))) == (5, 42, 300, 447)


def test_same_seed_same_item_other_seed_other_item() -> None:
    a, b, c = generate(3, 7), generate(3, 7), generate(4, 7)
    assert np.array_equal(np.asarray(a.images[0]), np.asarray(b.images[0]))
    assert (a.question, a.answer, a.metadata) == (b.question, b.answer, b.metadata)
    assert not np.array_equal(np.asarray(a.images[0]), np.asarray(c.images[0]))


def test_render_once_renders_an_item_once_within_its_block_only() -> None:
    """The demo's data stage loads its items three times: inside the block every load after
    the first gets the same sample, with the pixels a fresh render has; outside, renders; a
    block inside another has its own items."""
    fresh = generate(5, 3)
    with render_once():
        first = generate(5, 3)
        rl = list(get_benchmark("synth_demo_rl").load(limit=2, seed=5))  # a large, a tiny
        assert rl[1].images is generate(5, 1 * len(CATEGORIES) + CATEGORIES.index("tiny")).images
        assert generate(5, 3) is first
        assert next(iter(get_benchmark("synth_demo").load(limit=4, seed=5))) is generate(5, 0)
        assert generate(6, 3) is not first  # another seed is another item
        with render_once():  # an inner block: its own items, dropped at its end
            inner = generate(5, 3)
            assert inner is not first and generate(5, 3) is inner
        assert generate(5, 3) is first  # the outer block's items are back
    assert np.array_equal(np.asarray(first.images[0]), np.asarray(fresh.images[0]))
    assert generate(5, 3) is not first


@pytest.mark.parametrize("processes", [1, 2])
def test_prerender_fills_the_block_with_the_items_load_yields(monkeypatch, processes) -> None:
    """Rendered in a spawn pool (or here), the items are the ones `load` would render: same
    pixels, question and facts; `load` then renders nothing more."""
    monkeypatch.setattr(synth_demo, "_POOL_MIN", 0)  # a pool even for six items
    plain, hinted_bench = get_benchmark("synth_demo"), get_benchmark(HINTED)
    fresh = [*plain.load(limit=4, seed=9), *hinted_bench.load(limit=2, seed=9)]
    with render_once():
        synth_demo.prerender(
            [*plain.item_keys(4, 9), *hinted_bench.item_keys(2, 9)], processes=processes
        )
        monkeypatch.setattr(synth_demo, "_generate", None)  # any render now would fail
        loaded = [*plain.load(limit=4, seed=9), *hinted_bench.load(limit=2, seed=9)]
    for a, b in zip(fresh, loaded, strict=True):
        assert np.array_equal(np.asarray(a.images[0]), np.asarray(b.images[0]))
        assert (a.id, a.question, a.answer, a.metadata) == (b.id, b.question, b.answer, b.metadata)
    with pytest.raises(RuntimeError, match="render_once"):
        synth_demo.prerender([(9, 0)], processes=1)


def test_categories_cycle_and_difficulty_follows_the_category() -> None:
    items = list(get_benchmark("synth_demo").load(limit=12, seed=0))
    assert [s.metadata["category"] for s in items] == [*CATEGORIES] * 3
    for s in items:
        assert s.metadata["difficulty"] == DIFFICULTY[s.metadata["category"]]
        assert s.images[0].size == (SIZE, SIZE)
        assert s.answer in "0123456789" and len(s.answer) == 1


@pytest.mark.parametrize("index", range(40))
def test_question_hint_and_region_agree(index: int) -> None:
    s = generate(0, index)
    region, category = s.metadata["region"], s.metadata["category"]
    assert all(0 <= v <= SIZE for v in region) and region[0] < region[2] and region[1] < region[3]
    if category == "search":
        assert not BOX.search(s.question), "a search question must not locate the box"
        assert contains(s.metadata["cell"], region), "the hinted ninth must hold the box"
        x0, y0, x1, y1 = s.metadata["cell"]
        row, col = (y0 + y1) * 3 // (2 * SIZE), (x0 + x1) * 3 // (2 * SIZE)
        assert tuple(s.metadata["cell"]) == cell_box(row, col)
        assert check_hint(s.metadata["hint"], s.answer).ok
    else:
        found = BOX.search(s.question)
        assert found and list(ast.literal_eval(found.group(0))) == list(region)


def test_hinted_variant_appends_the_answer_free_hint() -> None:
    plain = [
        s
        for s in get_benchmark("synth_demo").load(limit=8, seed=5)
        if s.metadata["category"] == "search"
    ]
    hints = list(get_benchmark(HINTED).load(limit=2, seed=5))
    assert [h.id for h in hints] == ["0", "1"]
    for h, s in zip(hints, plain, strict=True):
        assert h.question == f"{s.question}\n\nHint: {s.metadata['hint']}"
        assert h.answer == s.answer
    assert hinted(plain[0]).question == hints[0].question
