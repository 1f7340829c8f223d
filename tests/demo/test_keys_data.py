"""The demo's `synth_keys` SFT sets and the teacher's `told` pool (`beacon.demo.data.keys_sets`,
`keys_items`): the counts configured, and no item seen twice (hinted and unhinted `keyed`, the
SFT set's `told` items and the teacher's pool)."""

from __future__ import annotations

import numpy as np
import pytest

from beacon.benchmarks.synth_demo import render_once
from beacon.benchmarks.synth_keys import KEYED_HINT, KEYED_HINTED, MARKED_QUESTION
from beacon.demo.config import DemoConfig
from beacon.demo.data import keys_items, keys_sets, told_pool

MARKED, KEYED, TOLD = "synth_keys_marked", "synth_keys_keyed", "synth_keys_told"


def image_bytes(sample) -> bytes:
    return np.asarray(sample.images[0]).tobytes()


@pytest.fixture(scope="module")
def cfg() -> DemoConfig:
    data = {
        "marked_items": 3,
        "told_items": 5,
        "keyed_hinted_items": 6,
        "keyed_unhinted_items": 4,
        "train_seed": 3,
    }
    return DemoConfig.model_validate({"threads": 1, "data": data, "revue": {"told_pool": 8}})


@pytest.fixture(scope="module")
def items(cfg: DemoConfig) -> dict:
    with render_once():  # as the demo's stages call it
        return keys_items(cfg)


def test_the_sets_spans_are_as_configured(cfg: DemoConfig) -> None:
    assert keys_sets(cfg) == {
        MARKED: (0, 3),
        KEYED_HINTED: (0, 6),
        KEYED: (6, 4),
        TOLD: (0, 5 + 8),
    }


def test_the_items_are_the_spans_items_under_the_training_seed(items: dict) -> None:
    counts = {name: len(samples) for name, samples in items.items()}
    assert counts == {MARKED: 3, KEYED_HINTED: 6, KEYED: 4, TOLD: 13}
    assert [s.id for s in items[KEYED]] == ["6", "7", "8", "9"]
    assert [s.id for s in items[TOLD]] == [str(i) for i in range(13)]
    assert all(s.metadata["seed"] == 3 for samples in items.values() for s in samples)
    assert all(s.benchmark == name for name, samples in items.items() for s in samples)
    for s in items[KEYED_HINTED]:
        assert s.question == f"{MARKED_QUESTION}\n\nHint: {KEYED_HINT}"
    assert all(s.question == MARKED_QUESTION for s in items[KEYED])


def test_unhinted_keyed_items_are_not_the_hinted_ones(items: dict) -> None:
    hinted = {image_bytes(s) for s in items[KEYED_HINTED]}
    unhinted = {image_bytes(s) for s in items[KEYED]}
    assert len(hinted) == 6 and len(unhinted) == 4
    assert not hinted & unhinted


def test_the_teachers_told_pool_is_not_the_sft_told_items_and_half_red(
    cfg: DemoConfig, items: dict
) -> None:
    with render_once():
        teachers = told_pool(cfg)
    sft = {image_bytes(s) for s in items[TOLD][:5]}
    pool = {image_bytes(s) for s in teachers}
    assert len(sft) == 5 and len(pool) == 8
    assert not sft & pool
    assert [s.id for s in teachers] == [str(i) for i in range(5, 13)]
    assert sum(s.metadata["colour"] == "red" for s in teachers) == 4


def test_names_pick_some_sets(cfg: DemoConfig) -> None:
    with render_once():
        picked = keys_items(cfg, [KEYED])
    assert list(picked) == [KEYED] and len(picked[KEYED]) == 4
