"""`synth_keys`: a key box names the cell to read; kinds, layouts, red keys and the hints."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from beacon.benchmarks import get_benchmark, synth_demo, synth_keys
from beacon.benchmarks.synth_demo import cell_box, render_once
from beacon.benchmarks.synth_keys import (
    FRAME_GAP,
    FRAME_WIDTH,
    KEY_CELL,
    KEYED_HINT,
    KEYED_HINTED,
    KINDS,
    LAYOUT,
    MARKED_QUESTION,
    TOLD_QUESTION,
    UNINFORMATIVE_HINT,
    generate,
    grid_box,
    is_red,
    outer_cells,
    uninformative_hint_rows,
)
from beacon.train.grpo.hints import leak_reasons

FIXED_BOXES = {grid_box(r, c) for r in range(3) for c in range(3)}


def pixels(sample, box) -> np.ndarray:
    x0, y0, x1, y1 = box
    return np.asarray(sample.images[0])[y0:y1, x0:x1].astype(int)


def red_pixels(sample, box) -> int:
    """Pixels inside `box` (outline excluded) that are plainly red ink."""
    x0, y0, x1, y1 = box
    inside = pixels(sample, (x0 + 3, y0 + 3, x1 - 3, y1 - 3))
    r, g, b = inside[..., 0], inside[..., 1], inside[..., 2]
    return int(red_ink(r, g, b).sum())


def red_ink(r, g, b):
    """Where red ink is plain: far redder than the grey canvas, grey ink or dark digits."""
    return (r > 200) & (r - g > 80) & (r - b > 80)


def test_red_ink_is_lighter_than_grey_ink() -> None:
    """A red key differs from a grey one in luminance, not only in hue (`RED_INK`): the demo's
    tiny model did not learn to tell a deep red from grey."""
    for index in range(6):
        s = generate(0, index, "told")
        x0, y0, x1, y1 = s.metadata["key_box"]
        inside = pixels(s, (x0 + 3, y0 + 3, x1 - 3, y1 - 3)).astype(float)
        r, g, b = inside[..., 0], inside[..., 1], inside[..., 2]
        luminance = 0.299 * r + 0.587 * g + 0.114 * b
        if s.metadata["colour"] == "red":
            assert np.median(luminance[red_ink(r, g, b)]) > 125
        else:
            assert np.percentile(luminance, 2) < 115  # the grey digit's ink


def orange_ring(sample, box) -> int:
    """Orange pixels in the band where a frame around `box` is drawn."""
    x0, y0, _, y1 = box
    pad = FRAME_GAP + FRAME_WIDTH
    band = pixels(sample, (x0 - pad, y0 - pad, x0 - FRAME_GAP, y1 + pad))  # the frame's left side
    r, g, b = band[..., 0], band[..., 1], band[..., 2]
    return int(((r > 200) & (g > 100) & (g < 180) & (b < 80)).sum())


def test_the_nine_fixed_boxes_are_centred_40_by_48_in_their_cells() -> None:
    assert grid_box(1, 1) == (204, 200, 244, 248)  # the design's centre key box
    assert grid_box(0, 2) == (353, 50, 393, 98)
    for r in range(3):
        for c in range(3):
            x0, y0, x1, y1 = grid_box(r, c)
            cx0, cy0, cx1, cy1 = cell_box(r, c)
            assert (x1 - x0, y1 - y0) == (40, 48)
            assert abs((x0 - cx0) - (cx1 - x1)) <= 1 and abs((y0 - cy0) - (cy1 - y1)) <= 1


def test_reading_order_skips_the_key_cell() -> None:
    assert outer_cells("C") == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1), (2, 2)]
    assert outer_cells("K") == [(0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]


@pytest.mark.parametrize("kind", KINDS)
def test_items_hold_distinct_digits_a_key_in_range_and_the_target_it_names(kind: str) -> None:
    reds = 0
    for index in range(24):
        s = generate(3, index, kind)
        m = s.metadata
        layout = LAYOUT[kind]
        assert m["kind"] == m["category"] == kind and m["layout"] == layout
        assert s.images[0].size == (448, 448)
        assert len(set(m["digits"])) == 8 and all(0 <= d <= 9 for d in m["digits"])
        assert 1 <= m["key"] <= 8 and 1 <= m["target"] <= 8
        assert m["key_box"] == list(grid_box(*KEY_CELL[layout]))
        assert m["cell_boxes"] == [list(grid_box(*cell)) for cell in outer_cells(layout)]
        assert {tuple(b) for b in [m["key_box"], *m["cell_boxes"]]} == FIXED_BOXES
        assert s.answer == str(m["digits"][m["target"] - 1])
        target_box = m["cell_boxes"][m["target"] - 1]
        assert m["region"] == target_box
        assert s.question == (TOLD_QUESTION if kind == "told" else MARKED_QUESTION)
        assert (red_pixels(s, m["key_box"]) > 20) == (m["colour"] == "red")
        if kind == "marked":
            assert m["named"] == m["key"] != m["target"], "the key is a decoy"
            assert m["regions"] == [target_box]
            assert orange_ring(s, target_box) > 100
            decoy_box = m["cell_boxes"][m["key"] - 1]
            assert orange_ring(s, decoy_box) == 0
        else:
            assert m["regions"] == [m["key_box"], target_box]
            assert all(orange_ring(s, b) == 0 for b in m["cell_boxes"])
            red = m["colour"] == "red"
            assert m["target"] == m["named"] == (9 - m["key"] if red else m["key"])
            reds += red
        assert ("hint" in m) == (kind == "keyed")
    assert reds == (12 if kind == "told" else 0)


def test_red_keys_are_spread_evenly_and_a_lower_share_only_recolours_the_key() -> None:
    assert sum(is_red(i, 0.5) for i in range(100)) == 50
    assert sum(is_red(i, 0.02) for i in range(100)) == 2
    assert sum(is_red(i, 0.3) for i in range(10)) == 3
    index = next(i for i in range(100) if is_red(i, 0.5) and not is_red(i, 0.02))
    red, plain = generate(0, index, "told", 0.5), generate(0, index, "told", 0.02)
    assert (red.metadata["colour"], plain.metadata["colour"]) == ("red", "grey")
    assert red.metadata["digits"] == plain.metadata["digits"]
    assert red.metadata["key"] == plain.metadata["key"]
    assert red.metadata["target"] == 9 - plain.metadata["target"]
    changed = np.argwhere(np.any(np.asarray(red.images[0]) != np.asarray(plain.images[0]), -1))
    x0, y0, x1, y1 = red.metadata["key_box"]
    assert changed.size and all(y0 <= y < y1 and x0 <= x < x1 for y, x in changed)


def test_same_seed_same_item_other_seed_or_kind_another() -> None:
    a, b = generate(1, 5, "keyed"), generate(1, 5, "keyed")
    assert np.array_equal(np.asarray(a.images[0]), np.asarray(b.images[0]))
    assert (a.question, a.answer, a.metadata) == (b.question, b.answer, b.metadata)
    for other in (generate(2, 5, "keyed"), generate(1, 5, "marked")):
        assert not np.array_equal(np.asarray(a.images[0]), np.asarray(other.images[0]))


def test_images_survive_a_png_round_trip() -> None:
    s = generate(0, 0, "told")
    png = io.BytesIO()
    s.images[0].save(png, format="PNG")
    decoded = Image.open(io.BytesIO(png.getvalue())).convert("RGB")
    assert np.array_equal(np.asarray(decoded), np.asarray(s.images[0]))


def test_the_mix_cycles_the_kinds_and_holds_the_per_kind_items() -> None:
    mixed = list(get_benchmark("synth_keys").load(limit=6, seed=4))
    assert [s.metadata["kind"] for s in mixed] == [*KINDS, *KINDS]
    assert [s.id for s in mixed] == [str(i) for i in range(6)]
    assert {s.benchmark for s in mixed} == {"synth_keys"}
    for kind in KINDS:
        alone = list(get_benchmark(f"synth_keys_{kind}").load(limit=2, seed=4))
        assert [s.benchmark for s in alone] == [f"synth_keys_{kind}"] * 2
        picked = [s for s in mixed if s.metadata["kind"] == kind]
        for a, b in zip(alone, picked, strict=True):
            assert (a.answer, a.metadata) == (b.answer, b.metadata)


def test_the_keyed_hint_is_answer_free_and_the_hinted_variant_carries_it() -> None:
    for hint in (KEYED_HINT, UNINFORMATIVE_HINT):
        for digit in range(10):
            assert leak_reasons(hint, str(digit)) == [], (hint, digit)
    plain = list(get_benchmark("synth_keys_keyed").load(limit=3, seed=2))
    hinted = list(get_benchmark(KEYED_HINTED).load(limit=3, seed=2))
    for h, s in zip(hinted, plain, strict=True):
        assert h.question == f"{MARKED_QUESTION}\n\nHint: {KEYED_HINT}"
        assert (h.id, h.answer, h.benchmark) == (s.id, s.answer, KEYED_HINTED)
        assert h.metadata["hinted"] and s.metadata["hint"] == KEYED_HINT
    rows = uninformative_hint_rows(plain)
    expected = {"benchmark": "synth_keys_keyed", "sample_id": "1", "hint": UNINFORMATIVE_HINT}
    assert rows[1] == expected


def test_prerender_in_a_pool_gives_the_items_load_yields(monkeypatch) -> None:
    monkeypatch.setattr(synth_demo, "_POOL_MIN", 0)  # a pool even for four items
    bench = get_benchmark("synth_keys")
    fresh = list(bench.load(limit=4, seed=7))
    with render_once():
        synth_keys.prerender(bench.item_keys(4, 7), processes=2)
        monkeypatch.setattr(synth_keys, "_generate", None)  # any render now would fail
        loaded = list(bench.load(limit=4, seed=7))
        assert synth_demo.generate(7, 0).metadata["category"] == "large"  # a synth_demo key
    for a, b in zip(fresh, loaded, strict=True):
        assert np.array_equal(np.asarray(a.images[0]), np.asarray(b.images[0]))
        assert (a.id, a.question, a.answer, a.metadata) == (b.id, b.question, b.answer, b.metadata)


def test_bad_kind_or_share_is_refused_with_the_allowed_values() -> None:
    with pytest.raises(ValueError, match="marked, keyed, told"):
        generate(0, 0, "boxed")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        generate(0, 0, "told", red_share=1.5)


def image_bytes(sample) -> bytes:
    return np.asarray(sample.images[0]).tobytes()


@pytest.fixture(scope="module")
def rl_pool() -> list:
    """The demo's GRPO pool: `beacon demo` loads 240 `synth_keys_rl` items under seed 11."""
    return list(get_benchmark("synth_keys_rl").load(limit=240, seed=11))


def test_the_rl_pool_cycles_its_mix_and_holds_240_distinct_images(rl_pool) -> None:
    assert [s.id for s in rl_pool] == [str(i) for i in range(240)]
    assert {s.benchmark for s in rl_pool} == {"synth_keys_rl"}
    assert [s.metadata["category"] for s in rl_pool] == [*synth_keys.RL_MIX] * 40
    assert len({image_bytes(s) for s in rl_pool}) == 240


def test_the_rl_pools_keyed_items_are_keyed_items_0_to_79_with_the_hint(rl_pool) -> None:
    """The HGCE premise stage measures `synth_keys_keyed` items 0..79 of seed 11 as the pool's
    keyed items (pipeline.hgce_premises: `rl.items // 3`): they must be exactly those."""
    keyed = [s for s in rl_pool if s.metadata.get("kind") == "keyed"]
    assert len(keyed) == 80 == 240 // 3
    plain = list(get_benchmark("synth_keys_keyed").load(limit=80, seed=11))
    for number, (item, alone) in enumerate(zip(keyed, plain, strict=True)):
        expected = generate(11, number, "keyed")
        assert image_bytes(item) == image_bytes(expected) == image_bytes(alone)
        assert (item.question, item.answer, item.metadata) == (
            expected.question,
            expected.answer,
            expected.metadata,
        )
        assert item.metadata["hint"] == KEYED_HINT
    marked = [s for s in rl_pool if s.metadata.get("kind") == "marked"]
    assert len(marked) == 40 and all("hint" not in s.metadata for s in marked)
    for number, item in enumerate(marked):
        assert image_bytes(item) == image_bytes(generate(11, number, "marked"))


def test_the_rl_pools_synth_demo_items_are_that_categorys_next_items(rl_pool) -> None:
    large = [s for s in rl_pool if s.metadata["category"] == "large"]
    tiny = [s for s in rl_pool if s.metadata["category"] == "tiny"]
    assert (len(large), len(tiny)) == (80, 40)
    step = len(synth_demo.CATEGORIES)
    for n in (0, 1, 79):
        assert image_bytes(large[n]) == image_bytes(synth_demo.generate(11, n * step))
    for n in (0, 39):
        assert image_bytes(tiny[n]) == image_bytes(synth_demo.generate(11, n * step + 2))


def test_the_opd_pool_alternates_told_items_and_synth_demo_rl_items() -> None:
    pool = list(get_benchmark("synth_keys_opd").load(limit=24, seed=11))
    rl = list(get_benchmark("synth_demo_rl").load(limit=12, seed=11))
    assert [s.id for s in pool] == [str(i) for i in range(24)]
    assert {s.benchmark for s in pool} == {"synth_keys_opd"}
    told, one_hop = pool[0::2], pool[1::2]
    for n, s in enumerate(told):
        assert s.metadata["kind"] == "told" and s.question == TOLD_QUESTION
        assert s.metadata["colour"] == ("red" if is_red(n, 0.5) else "grey")
        assert image_bytes(s) == image_bytes(generate(11, n, "told"))
    assert [s.metadata["colour"] for s in told[:4]] == ["grey", "red", "grey", "red"]
    for s, r in zip(one_hop, rl, strict=True):
        assert "kind" not in s.metadata
        assert image_bytes(s) == image_bytes(r)
        assert (s.question, s.answer, s.metadata) == (r.question, r.answer, r.metadata)
        assert image_bytes(r) == image_bytes(synth_demo.rl_item(11, int(r.id)))


def test_synth_demo_rl_items_follow_its_mix() -> None:
    step = len(synth_demo.CATEGORIES)
    for index in range(8):
        item = synth_demo.rl_item(3, index)
        category = synth_demo.RL_MIX[index % len(synth_demo.RL_MIX)]
        assert item.metadata["category"] == category
        offset = synth_demo.CATEGORIES.index(category)
        assert image_bytes(item) == image_bytes(synth_demo.generate(3, index * step + offset))
