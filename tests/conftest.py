"""Shared fixtures: the tiny offline model, a sandbox, and a per-turn token script.

The suite is hermetic: `pytest_configure` points the home folder and every cache a test (or a
`beacon` process it starts) could read or fill at one fresh temporary folder, before any test
module is imported. A test that needs an earlier run's leftovers (a cached tiny model, a Hugging
Face download, a matplotlib font cache) then fails on every machine, not only on a new one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import torch

HERMETIC_ROOT_ENV = "BEACON_TEST_ROOT"
"""Names the session's temporary root, so a test can check where the caches point."""
_ROOT_KEY = pytest.StashKey[Path]()

_CACHE_DIRS = {
    "BEACON_CACHE": "beacon-cache",
    "HF_HOME": "huggingface",
    "HF_DATASETS_CACHE": "huggingface/datasets",
    "XDG_CACHE_HOME": "cache",
    "XDG_CONFIG_HOME": "config",
    "XDG_DATA_HOME": "data",
    "MPLCONFIGDIR": "matplotlib",
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
    "TRITON_CACHE_DIR": "triton",
}
_OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def pytest_configure(config: pytest.Config) -> None:
    """Give the session a fresh home and fresh caches, offline, before anything imports."""
    root = Path(tempfile.mkdtemp(prefix="beacon-tests-"))
    config.stash[_ROOT_KEY] = root
    (root / "home").mkdir()
    os.environ[HERMETIC_ROOT_ENV] = str(root)
    os.environ["HOME"] = str(root / "home")
    for name, sub in _CACHE_DIRS.items():
        (root / sub).mkdir(parents=True, exist_ok=True)
        os.environ[name] = str(root / sub)
    os.environ.update(_OFFLINE)


def pytest_unconfigure(config: pytest.Config) -> None:
    root = config.stash.get(_ROOT_KEY, None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """Each test leaves the process environment as it found it: code a test runs in-process
    (`beacon.cli.main` sets `TQDM_DISABLE` off a terminal, say) must not reach later tests or
    the processes they start."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    """The built-in tiny Qwen2-VL (random weights), built once per test session into its cache."""
    from beacon.engines.tiny import cached_tiny_model

    return cached_tiny_model("qwen2_vl")


class TurnScript:
    """Logits processor that makes a random tiny model write a fixed text in each turn.

    Turn n (counted by how many `marker` tokens, e.g. </sandbox_output>, the row already holds)
    writes `turns[n]` from its start: at each step the longest suffix of the row that begins the
    turn's script decides the next token. Random weights never write a code block by themselves.
    """

    def __init__(self, turns: Sequence[Sequence[int]], marker: int) -> None:
        self.turns = [list(t) for t in turns]
        self.marker = marker

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        forced = torch.full_like(scores, float("-inf"))
        for row in range(input_ids.shape[0]):
            ids = input_ids[row].tolist()
            script = self.turns[min(ids.count(self.marker), len(self.turns) - 1)]
            step = 0
            for k in range(min(len(script) - 1, len(ids)), 0, -1):
                if ids[-k:] == script[:k]:
                    step = k
                    break
            forced[row, script[step % len(script)]] = 0.0
        return forced


@pytest.fixture(scope="session")
def turn_script() -> type[TurnScript]:
    return TurnScript
