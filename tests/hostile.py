"""Hostile files for loader tests: a FIFO (an open for reading blocks until a writer comes) and a
character device that reads as endless zeros, both real, made in the test's own folder."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest


def make_fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def make_dev_zero(path: Path) -> Path:
    """A device node with /dev/zero's numbers at `path` (needs CAP_MKNOD; skipped without)."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o644, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("making a device node needs root (CAP_MKNOD); /dev/zero itself is tested")
    return path
