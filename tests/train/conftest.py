"""Fixtures for the training tests: the tiny model's tokenizer, an image store, and trajectory
files of scripted Thyme-format trajectories of mixed lengths."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from beacon.fakes.trajectories import scripted_trajectory
from beacon.images import ImageStore


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_path: Path) -> Any:
    from beacon.engines.tokenizer import HFTokenizer

    return HFTokenizer.from_pretrained(tiny_model_path)


@pytest.fixture(scope="session")
def train_data(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer: Any) -> Path:
    """A folder with `trajs.jsonl` (8 trajectories, 0-2 tool calls) and its `images/` store."""
    root = tmp_path_factory.mktemp("train-data")
    store = ImageStore(root / "images")
    lines = [
        scripted_trajectory(
            tiny_tokenizer, store, seed, tool_calls=seed % 3, filler_words=2 * seed
        ).to_json()
        for seed in range(8)
    ]
    (root / "trajs.jsonl").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="session")
def teacher_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from beacon.engines.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("teacher"), seed=1)


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """One intra-op thread: on a shared 2-core machine, two threads per process oversubscribe
    the cores and run the tiny model 10-15x slower. Subprocesses get OMP_NUM_THREADS=1."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
