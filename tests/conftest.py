"""Shared fixtures: the tiny offline model, a sandbox, and a per-turn token script."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    """The built-in tiny Qwen2-VL (random weights), built once per machine and cached."""
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
