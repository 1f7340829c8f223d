"""Encoded trajectories to Qwen-VL model inputs, and how a step's share is cut into micro-batches.

A `ModelBatch` holds right-padded `input_ids`, `attention_mask`, `labels` (-100 off the loss
mask), `mm_token_type_ids` (1 on image tokens) and the pixels of every image of every row, in
the order their tokens appear (row by row, segment by segment). Position ids are not built
here: Qwen-VL's own `get_rope_index` computes the M-RoPE positions from `mm_token_type_ids`,
`image_grid_thw` and the attention mask inside `forward`, so an image in a later segment gets
the positions the model would give it at generation time (tests check this against unpadded
single-row forwards).

Micro-batching, and why not packing: the loss is normalised by the step's global count of loss
tokens (`beacon.train.core.loss`), so any split of a step into micro-batches gives the same loss and
gradient. `plan_buckets` sorts by length and cuts the sorted rows into the micro-batches that
minimise padded tokens plus a fixed cost per micro-batch, under a padded-token budget. Packing
several rows into one would need block-diagonal attention (varlen flash-attention), which the
CPU path and eager attention lack.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from PIL import Image

from beacon.images import Recent
from beacon.rollout import TrajectoryCheck, check_trajectory
from beacon.train.core.encode import EncodedTrajectory

IGNORE_INDEX = -100


@dataclass
class ImagePixels:
    """One image as the vision tower takes it: patches [n_patches, patch_dim], grid (t, h, w)."""

    pixel_values: torch.Tensor
    grid_thw: torch.Tensor


PIXEL_BUDGET = 4 << 30
"""Bytes of processed images a training process keeps. Every step reads its rows' images again
(each epoch, each GRPO group's rollouts): the demo's SFT set holds up to ~7 000 images of
~0.3 MB each, and a cache smaller than the set misses on almost every read of a shuffled epoch
(loading and processing ~50 images a step made SFT steps 1.7x slower)."""


class PixelCache:
    """Image key -> `ImagePixels`, computed by the checkpoint's image processor; the most
    recently used up to `budget` bytes are kept."""

    def __init__(
        self,
        image_processor: Any,
        load_image: Callable[[str], Image.Image],
        budget: int = PIXEL_BUDGET,
    ) -> None:
        self.image_processor = image_processor
        self.load_image = load_image
        self.merge = int(getattr(image_processor, "merge_size", 2))
        self.get: Callable[[str], ImagePixels] = Recent(
            lambda key: _processed(image_processor, self.load_image(key)),
            lambda key: key,
            _nbytes,
            budget,
        )

    def tokens(self, key: str) -> int:
        return int(self.get(key).grid_thw.prod()) // (self.merge**2)


def rollout_check(tokenizer: Any, pixels: PixelCache) -> TrajectoryCheck:
    """`beacon.rollout.check_trajectory` against this trainer's tokenizer and image processor:
    what `Rollouts` runs on every trajectory before a trainer may train on it."""
    return partial(
        check_trajectory, image_token_id=tokenizer.image_token_id, image_tokens=pixels.tokens
    )


def _processed(image_processor: Any, image: Image.Image) -> ImagePixels:
    out = image_processor(images=[image], return_tensors="pt")
    return ImagePixels(out["pixel_values"], out["image_grid_thw"][0])


def _nbytes(pixels: ImagePixels) -> int:
    return sum(t.element_size() * t.nelement() for t in (pixels.pixel_values, pixels.grid_thw))


@dataclass
class ModelBatch:
    """Model inputs of one micro-batch, plus its token counts for the metrics."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor
    mm_token_type_ids: torch.Tensor
    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor | None
    num_tokens: int
    num_loss_tokens: int

    def model_inputs(self) -> dict[str, torch.Tensor]:
        """Keyword arguments for the model's forward (labels stay out: the loss is ours)."""
        inputs = {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "mm_token_type_ids": self.mm_token_type_ids,
        }
        if self.pixel_values is not None:
            inputs["pixel_values"] = self.pixel_values
            inputs["image_grid_thw"] = self.image_grid_thw
        return inputs

    def to(self, device: torch.device | str) -> ModelBatch:
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device)

        return ModelBatch(
            input_ids=self.input_ids.to(device),
            attention_mask=self.attention_mask.to(device),
            labels=self.labels.to(device),
            mm_token_type_ids=self.mm_token_type_ids.to(device),
            pixel_values=move(self.pixel_values),
            image_grid_thw=move(self.image_grid_thw),
            num_tokens=self.num_tokens,
            num_loss_tokens=self.num_loss_tokens,
        )


def collate(
    rows: Sequence[EncodedTrajectory],
    pad_token_id: int,
    image_token_id: int | None,
    pixels: PixelCache | None,
) -> ModelBatch:
    """Right-pad `rows` into one `ModelBatch`; images follow row order, then token order."""
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids = torch.tensor(row.input_ids, dtype=torch.long)
        mask = torch.tensor(row.loss_mask, dtype=torch.bool)
        input_ids[i, : len(row)] = ids
        labels[i, : len(row)] = torch.where(mask, ids, IGNORE_INDEX)
        attention_mask[i, : len(row)] = 1
    is_image = input_ids == image_token_id if image_token_id is not None else input_ids < 0
    mm_token_type_ids = (is_image & attention_mask.bool()).long()
    keys = [key for row in rows for key in row.images]
    pixel_values = grid = None
    if keys:
        if pixels is None:
            raise ValueError("rows have images but no image processor was given")
        images = [pixels.get(key) for key in keys]
        pixel_values = torch.cat([im.pixel_values for im in images])
        grid = torch.stack([im.grid_thw for im in images])
    return ModelBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        labels=labels,
        mm_token_type_ids=mm_token_type_ids,
        pixel_values=pixel_values,
        image_grid_thw=grid,
        num_tokens=int(attention_mask.sum()),
        num_loss_tokens=int((labels != IGNORE_INDEX).sum()),
    )


@dataclass(frozen=True)
class Collator:
    """`collate` with one model's constants bound: what a trainer hands its policy update, which
    calls it once per micro-batch."""

    pad_token_id: int
    image_token_id: int | None
    pixels: PixelCache | None

    def __call__(self, rows: Sequence[EncodedTrajectory]) -> ModelBatch:
        return collate(rows, self.pad_token_id, self.image_token_id, self.pixels)


def plan_buckets(
    lengths: Sequence[int], max_tokens: int, microbatch_cost: int = 0
) -> list[list[int]]:
    """Indices grouped into micro-batches of similar length, with the least padded work.

    Rows are sorted longest first and cut into contiguous groups g minimising

        sum_g ( |g| * max_{i in g} len_i  +  c )    subject to  |g| * max_g <= max_tokens

    where c = `microbatch_cost` is the fixed cost of one micro-batch in token-equivalents
    (kernel launches, the optimizer-free part of a forward). Solved exactly by dynamic
    programming over cut points, O(n^2) for n rows of one process's share. A row longer than
    `max_tokens` goes alone.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    n = len(order)
    best = [0.0] + [float("inf")] * n  # best[j]: cost of the first j sorted rows
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j - 1, -1, -1):  # group = sorted rows i..j-1, longest is row i
            padded = (j - i) * lengths[order[i]]
            if padded > max_tokens and j - i > 1:
                break
            cost = best[i] + padded + microbatch_cost
            if cost < best[j]:
                best[j], cut[j] = cost, i
    groups: list[list[int]] = []
    j = n
    while j > 0:
        groups.append(order[cut[j] : j])
        j = cut[j]
    return groups[::-1]


def plan_padded(count: int, micro_batch_size: int) -> list[list[int]]:
    """Indices in data order, `micro_batch_size` per micro-batch (the naive baseline)."""
    return [
        list(range(s, min(s + micro_batch_size, count))) for s in range(0, count, micro_batch_size)
    ]
