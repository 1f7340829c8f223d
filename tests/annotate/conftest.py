"""The annotation file the tests share (built by `helpers.build_rows`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .helpers import build_rows


@pytest.fixture
def annotation_file(tmp_path: Path) -> Path:
    """An annotation JSONL (6 rollouts, 5 groups, all three group types) with its images."""
    path = tmp_path / "sample.jsonl"
    rows = build_rows(tmp_path)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
