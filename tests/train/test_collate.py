"""Batching: padding and labels, M-RoPE positions with images in later segments, and the
invariant that the split into micro-batches does not change loss or gradient."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from beacon.fakes.trajectories import scripted_trajectory
from beacon.images import ImageStore
from beacon.train.core.collate import (
    IGNORE_INDEX,
    PixelCache,
    collate,
    plan_buckets,
    plan_padded,
)
from beacon.train.core.encode import encode_trajectory
from beacon.train.core.loss import count_targets, summed_token_nll


@pytest.fixture(scope="module")
def model(tiny_model_path: Path) -> Any:
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(0)
    return AutoModelForImageTextToText.from_pretrained(tiny_model_path, dtype=torch.float32).eval()


@pytest.fixture()
def rows(tiny_tokenizer: Any, tmp_path: Path) -> tuple[list, PixelCache]:
    store = ImageStore(tmp_path)
    trajs = [
        scripted_trajectory(tiny_tokenizer, store, seed=s, tool_calls=c, filler_words=w)
        for s, c, w in [(0, 2, 0), (1, 0, 9), (2, 1, 3), (3, 3, 1)]
    ]
    encoded = [encode_trajectory(t, tiny_tokenizer, store.get) for t in trajs]
    pixels = PixelCache(tiny_tokenizer.processor.image_processor, store.get)
    return encoded, pixels


def test_collate_pads_right_and_labels_only_targets(rows: Any, tiny_tokenizer: Any) -> None:
    encoded, pixels = rows
    batch = collate(encoded, tiny_tokenizer.pad_token_id, tiny_tokenizer.image_token_id, pixels)
    width = max(len(r) for r in encoded)
    assert batch.input_ids.shape == (4, width)
    for i, row in enumerate(encoded):
        n = len(row)
        assert batch.input_ids[i, :n].tolist() == row.input_ids
        assert batch.attention_mask[i].tolist() == [1] * n + [0] * (width - n)
        want = [t if m else IGNORE_INDEX for t, m in zip(row.input_ids, row.loss_mask, strict=True)]
        assert batch.labels[i, :n].tolist() == want
        assert set(batch.labels[i, n:].tolist()) <= {IGNORE_INDEX}
    assert batch.num_tokens == sum(len(r) for r in encoded)
    assert batch.num_loss_tokens == sum(r.num_loss_tokens for r in encoded)
    image_id = tiny_tokenizer.image_token_id
    assert torch.equal(batch.mm_token_type_ids.bool(), batch.input_ids == image_id)
    assert batch.image_grid_thw.shape == (sum(len(r.images) for r in encoded), 3)
    merged = int(batch.image_grid_thw.prod(-1).sum()) // 4
    assert merged == int((batch.input_ids == image_id).sum())


def test_pixel_cache_processes_each_image_once_within_its_byte_budget(
    rows: Any, tiny_tokenizer: Any
) -> None:
    encoded, pixels = rows
    keys = list(dict.fromkeys(k for r in encoded for k in r.images))
    loads: list[str] = []

    def counting(budget: int) -> PixelCache:
        def load(key: str) -> Any:
            loads.append(key)
            return pixels.load_image(key)

        return PixelCache(tiny_tokenizer.processor.image_processor, load, budget=budget)

    roomy = counting(1 << 30)
    for _ in range(3):  # three epochs
        collate(encoded, tiny_tokenizer.pad_token_id, tiny_tokenizer.image_token_id, roomy)
    assert sorted(loads) == sorted(keys)
    one = pixels.get(keys[0])
    size = one.pixel_values.element_size() * one.pixel_values.nelement() + 3 * 8
    loads.clear()
    tight = counting(size)  # room for one image: a cycle over all of them misses every time
    for _ in range(2):
        for key in keys:
            assert torch.equal(tight.get(key).pixel_values, pixels.get(key).pixel_values)
    assert loads == keys * 2


def test_batched_forward_matches_single_rows(rows: Any, tiny_tokenizer: Any, model: Any) -> None:
    """Padding and image order are right iff each row's logits equal its unpadded forward.

    Row 0 has images in two later observation segments, so its text positions after them
    depend on M-RoPE (positions advance by max(h, w) per image, not by its token count).
    """
    encoded, pixels = rows
    pad, image_id = tiny_tokenizer.pad_token_id, tiny_tokenizer.image_token_id
    batch = collate(encoded, pad, image_id, pixels)
    with torch.no_grad():
        logits = model(**batch.model_inputs()).logits
        for i, row in enumerate(encoded):
            single = collate([row], pad, image_id, pixels)
            alone = model(**single.model_inputs()).logits[0]
            torch.testing.assert_close(logits[i, : len(row)], alone, atol=1e-5, rtol=1e-5)
    positions, _ = model.model.get_rope_index(
        batch.input_ids[:1],
        mm_token_type_ids=batch.mm_token_type_ids[:1],
        image_grid_thw=batch.image_grid_thw[: len(encoded[0].images)],
        attention_mask=batch.attention_mask[:1],
    )
    n = len(encoded[0])
    assert int(positions[0, 0, n - 1]) < n - 1  # images compress positions: true M-RoPE


def test_bucketed_equals_padded_loss_and_gradient(
    rows: Any, tiny_tokenizer: Any, model: Any
) -> None:
    encoded, pixels = rows
    pad, image_id = tiny_tokenizer.pad_token_id, tiny_tokenizer.image_token_id

    def loss_and_grad(groups: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        batches = [collate([encoded[i] for i in g], pad, image_id, pixels) for g in groups]
        total = sum(count_targets(b.labels) for b in batches)
        model.zero_grad()
        loss = sum(summed_token_nll(model(**b.model_inputs()).logits, b.labels) for b in batches)
        (loss / total).backward()
        grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        return (loss / total).detach(), grad

    padded = loss_and_grad(plan_padded(len(encoded), 4))
    bucketed = loss_and_grad(plan_buckets([len(r) for r in encoded], 300))
    assert len(plan_buckets([len(r) for r in encoded], 300)) > 1
    torch.testing.assert_close(bucketed[0], padded[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(bucketed[1], padded[1], atol=1e-5, rtol=1e-4)


def test_plan_buckets_respects_budget_and_covers_all() -> None:
    lengths = [50, 400, 120, 130, 60, 900, 55]
    groups = plan_buckets(lengths, 400)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        padded = len(g) * max(lengths[i] for i in g)
        assert padded <= 400 or len(g) == 1
    assert [5] in groups  # longer than the budget: alone
    assert plan_padded(5, 2) == [[0, 1], [2, 3], [4]]


def _cost(groups: list[list[int]], lengths: list[int], c: int) -> int:
    return sum(len(g) * max(lengths[i] for i in g) + c for g in groups)


@pytest.mark.parametrize("seed", range(5))
def test_plan_buckets_is_optimal_among_contiguous_cuts(seed: int) -> None:
    """The DP's cost equals the best of all 2^(n-1) cuts of the sorted rows (brute force)."""
    import itertools
    import random

    rng = random.Random(seed)
    lengths = [rng.randint(10, 300) for _ in range(8)]
    budget, c = 900, 40
    order = sorted(range(8), key=lambda i: (-lengths[i], i))
    best = None
    for cuts in itertools.product([0, 1], repeat=7):
        groups, current = [], [order[0]]
        for flag, i in zip(cuts, order[1:], strict=True):
            if flag:
                groups.append(current)
                current = [i]
            else:
                current.append(i)
        groups.append(current)
        if all(len(g) * lengths[g[0]] <= budget or len(g) == 1 for g in groups):
            cost = _cost(groups, lengths, c)
            best = cost if best is None else min(best, cost)
    assert _cost(plan_buckets(lengths, budget, c), lengths, c) == best
