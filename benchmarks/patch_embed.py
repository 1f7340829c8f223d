"""Vision patch embeddings: the stock `nn.Conv3d` against the same weights as one matrix product.

`beacon.engines.patch_embed.linear_patch_embeddings` runs Qwen-VL's patch embedding (a Conv3d
whose stride is its kernel, one kernel per patch) as `linear`. Two rows, each timed in
alternating rounds of both forms on the demo model (`beacon.demo.model`, built here at random):
the patch embedding alone, forward and backward over 4,000 patches (an SFT step of the demo:
32 trajectories, ~1.5 images of 64 patches each), and a whole SFT forward + backward of the demo
model on a batch of that shape (32 rows of 96 tokens). Each row gives the medians with the trick
on (`PatchConv3d`, linear) and off (`nn.Conv3d`, what `BEACON_LINEAR_PATCH_EMBED=0` leaves),
their difference and ratio. On the CPU only: the module runs the stock convolution elsewhere.
A benchmark, not a test.

    nice -n 5 python benchmarks/patch_embed.py --threads 1 --rounds 5 --steps 3
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from transformers import AutoModelForImageTextToText

from beacon.demo.model import make_demo_model
from beacon.engines.patch_embed import PatchConv3d, linear_patch_embeddings
from beacon.engines.tokenizer import HFTokenizer

ROWS, ROW_TOKENS, GRID = 32, 96, (1, 8, 8)  # an 8x8 patch grid: 16 merged image tokens


def demo_batch(tokenizer: HFTokenizer, config: Any) -> dict[str, torch.Tensor]:
    """32 rows of 96 tokens, alternately one and two images (as the demo's SFT rows average
    1.55), text from the demo's own vocabulary, every text token a target."""
    image_tokens = GRID[1] * GRID[2] // 4
    text = tokenizer.encode("Which digit is in the cell? The answer is 7.")
    rows, grids = [], []
    for r in range(ROWS):
        row: list[int] = []
        for _ in range(1 + r % 2):
            row += [config.vision_start_token_id] + [tokenizer.image_token_id] * image_tokens
            row += [config.vision_end_token_id]
            grids.append(GRID)
        while len(row) < ROW_TOKENS:
            row += text
        rows.append(row[:ROW_TOKENS])
    input_ids = torch.tensor(rows)
    labels = input_ids.masked_fill(input_ids == tokenizer.image_token_id, -100)
    patches = len(grids) * GRID[1] * GRID[2]
    torch.manual_seed(0)
    return {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "labels": labels,
        "mm_token_type_ids": (input_ids == tokenizer.image_token_id).long(),
        "pixel_values": torch.randn(patches, 3 * 2 * 14 * 14),
        "image_grid_thw": torch.tensor(grids),
    }


def set_linear(model: nn.Module, linear: bool) -> None:
    proj = model.model.visual.patch_embed.proj
    proj.__class__ = PatchConv3d if linear else nn.Conv3d


def rounds(
    step: Callable[[], None], set_form: Callable[[bool], None], n: int, reps: int
) -> tuple[float, float]:
    """Median ms per call of `step` for the Conv3d and the linear form, alternating rounds."""
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(n):
        for linear in (False, True):
            set_form(linear)
            step()  # warm-up
            start = time.perf_counter()
            for _ in range(reps):
                step()
            times[linear].append((time.perf_counter() - start) / reps * 1000)
    return statistics.median(times[False]), statistics.median(times[True])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of both forms")
    parser.add_argument("--steps", type=int, default=5, help="timed calls per round")
    args = parser.parse_args()
    if min(args.threads, args.rounds, args.steps) < 1:
        parser.error("--threads, --rounds and --steps must each be at least 1")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        make_demo_model(folder, seed=0)
        model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32)
        tokenizer = HFTokenizer.from_pretrained(folder)
    linear_patch_embeddings(model)
    batch = demo_batch(tokenizer, model.config)
    embed = model.model.visual.patch_embed
    patches = batch["pixel_values"]  # as in training: gradients for the weight only

    def embed_step() -> None:
        embed(patches).sum().backward()

    def model_step() -> None:
        model(**batch).loss.backward()

    def set_form(linear: bool) -> None:
        set_linear(model, linear)

    n_patches = patches.shape[0]
    print(
        f"machine: {platform.machine()}, {torch.get_num_threads()} torch threads, torch "
        f"{torch.__version__}, Python {platform.python_version()}"
    )
    print(
        f"demo model, {ROWS} rows x {ROW_TOKENS} tokens, {n_patches} patches; medians of "
        f"{args.rounds} alternating rounds of {args.steps} calls\n"
    )
    print("| forward + backward | on (linear) ms | off (Conv3d) ms | off - on | off / on |")
    print("|---|---|---|---|---|")
    for name, step in (
        (f"patch embedding, {n_patches} patches", embed_step),
        ("SFT step of the demo model", model_step),
    ):
        conv, linear = rounds(step, set_form, args.rounds, args.steps)
        diff, ratio = conv - linear, conv / linear
        print(f"| {name} | {linear:.1f} | {conv:.1f} | {diff:+.1f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
