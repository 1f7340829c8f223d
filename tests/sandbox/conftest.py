"""Sandbox fixtures: one small jailed pool per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from beacon.sandbox import Sandbox

from .helpers import tight_config


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(tight_config()) as sb:
        yield sb
