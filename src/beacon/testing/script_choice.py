"""A scripted-choice sampler for demos, tests and the GRPO step benchmark on the tiny model.

A random tiny model never writes a code block or a right answer by itself, so GRPO on it would
drop every group. `ScriptChoice` is an engine logits processor that allows, in turn n, only
continuations of the scripts `turns[n]`; unlike a forcing script, the model's own logits choose
among the allowed next tokens. Sampling therefore picks a script by the policy's probabilities
and training moves them: real rewards, real advantages, real updates, on CPU in seconds.

`synth_choices` builds it for synth items: turn 0 answers one of the given items' answers or
crops; turn 1 (after the crop's observation) answers. Not for real models.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

CROP_CALL = "Zoom. <code>\n```python\nimage.crop((0, 0, 40, 30)).show()\n```\n</code>"


class ScriptChoice:
    """Logits processor: only continuations of the scripts of the row's current turn survive.

    Turn n is counted by the `marker` tokens (the observation close tag) the row holds; the
    longest suffix of the row that begins some script decides which tokens may come next.
    """

    def __init__(self, turns: Sequence[Sequence[Sequence[int]]], marker: int) -> None:
        self.turns = [[list(s) for s in scripts] for scripts in turns]
        self.marker = marker

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        out = torch.full_like(scores, float("-inf"))
        for row in range(input_ids.shape[0]):
            ids = input_ids[row].tolist()
            scripts = self.turns[min(ids.count(self.marker), len(self.turns) - 1)]
            allowed = next_script_tokens(ids, scripts)
            out[row, allowed] = scores[row, allowed]
        return out


def next_script_tokens(ids: list[int], scripts: list[list[int]]) -> list[int]:
    """Tokens that continue the longest script prefix ending `ids` (script starts if none)."""
    longest = max(len(s) for s in scripts)
    for k in range(min(longest - 1, len(ids)), 0, -1):
        found = [s[k] for s in scripts if len(s) > k and ids[-k:] == s[:k]]
        if found:
            return sorted(set(found))
    return sorted({s[0] for s in scripts})


def synth_choices(tokenizer: Any, answers: Sequence[str]) -> ScriptChoice:
    """Turn 0: `<answer>a</answer>` for each a in `answers`, or the crop call; turn 1: answer."""
    scripted = [tokenizer.encode(f"<answer>{a}</answer>") for a in answers]
    marker = tokenizer.encode("</sandbox_output>")[0]
    return ScriptChoice([[*scripted, tokenizer.encode(CROP_CALL)], scripted], marker)


class NoEndOfSequence:
    """Logits processor that keeps end-of-sequence away, so a request runs to its max_tokens,
    and counts the decode steps it saw (to tell that a long request has started)."""

    def __init__(self, eos: list[int]) -> None:
        self.eos, self.steps = eos, 0

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.steps += 1
        scores = scores.clone()
        scores[:, self.eos] = float("-inf")
        return scores
