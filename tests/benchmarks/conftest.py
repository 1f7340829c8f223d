"""Fixtures: a local copy of each benchmark in its published format (see local_copies.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .local_copies import BUILDERS


@pytest.fixture(autouse=True)
def _datasets_cache_in_tmp(tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> None:
    """Keep the lock/cache files `datasets` writes for local parquet out of ~/.cache."""
    import datasets

    cache = tmp_path_factory.getbasetemp() / "hf_datasets_cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)


@pytest.fixture
def local_copy_names() -> set[str]:
    """Benchmarks that have a local copy here (must be every registered one)."""
    return set(BUILDERS)


@pytest.fixture
def local_copy(tmp_path: Path) -> Callable[[str], Path | None]:
    """`local_copy(name)`: a path `get_benchmark(name).load(path=...)` reads."""
    return lambda name: BUILDERS[name](tmp_path)
