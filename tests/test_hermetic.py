"""The suite runs in a fresh home with fresh caches (tests/conftest.py), and `beacon` processes
started by tests inherit them: nothing reads or fills the user's ~/.cache or Hugging Face caches."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERMETIC_ROOT_ENV = "BEACON_TEST_ROOT"  # set by tests/conftest.py
CACHES = ("HOME", "BEACON_CACHE", "HF_HOME", "HF_DATASETS_CACHE", "XDG_CACHE_HOME", "MPLCONFIGDIR")


def _root() -> Path:
    return Path(os.environ[HERMETIC_ROOT_ENV])


@pytest.mark.parametrize("name", CACHES)
def test_every_cache_lies_in_the_session_temporary_root(name: str) -> None:
    assert Path(os.environ[name]).resolve().is_relative_to(_root().resolve())


def test_the_home_folder_is_the_session_one() -> None:
    assert Path.home().resolve() == (_root() / "home").resolve()
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_the_tiny_model_cache_is_built_under_the_session_root(tiny_model_path: Path) -> None:
    assert tiny_model_path.resolve().is_relative_to(_root().resolve())


def test_a_process_started_by_a_test_sees_the_same_caches() -> None:
    code = "import os, pathlib; print(pathlib.Path.home()); print(os.environ['BEACON_CACHE'])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert [Path(p).resolve() for p in out] == [
        (_root() / "home").resolve(),
        Path(os.environ["BEACON_CACHE"]).resolve(),
    ]
