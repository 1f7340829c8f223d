"""Helpers of the GRPO tests: a small GRPO config, and a logits processor that gives the random
tiny model a real choice between a few scripted responses (so rewards vary within a group)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

# synth (seed 0) items 0 and 1 answer 49E and 93V; item 2 (72) is never answered right.
ANSWERS = ("<answer>49E</answer>", "<answer>93V</answer>")
CODE = "Zoom. <code>\n```python\nimage.crop((0, 0, 40, 30)).show()\n```\n</code>"


class ScriptChoice:
    """Logits processor: in turn n, only continuations of the scripts `turns[n]` are allowed.

    Unlike a forcing script, the model's own logits choose among the allowed next tokens, so
    sampling picks a script at random by the policy's probabilities, and training moves them.
    Turn n is counted by the `marker` tokens (the observation close tag) the row holds.
    """

    def __init__(self, turns: Sequence[Sequence[Sequence[int]]], marker: int) -> None:
        self.turns = [[list(s) for s in scripts] for scripts in turns]
        self.marker = marker

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        out = torch.full_like(scores, float("-inf"))
        for row in range(input_ids.shape[0]):
            ids = input_ids[row].tolist()
            scripts = self.turns[min(ids.count(self.marker), len(self.turns) - 1)]
            allowed = _next_tokens(ids, scripts)
            out[row, allowed] = scores[row, allowed]
        return out


def _next_tokens(ids: list[int], scripts: list[list[int]]) -> list[int]:
    longest = max(len(s) for s in scripts)
    for k in range(min(longest - 1, len(ids)), 0, -1):
        found = [s[k] for s in scripts if len(s) > k and ids[-k:] == s[:k]]
        if found:
            return sorted(set(found))
    return sorted({s[0] for s in scripts})


def choice_processor(tokenizer: Any) -> ScriptChoice:
    """Turn 0: answer 49E, answer 93V, or crop; turn 1 (after the crop): one of the answers."""
    answers = [tokenizer.encode(a) for a in ANSWERS]
    marker = tokenizer.encode("</sandbox_output>")[0]
    return ScriptChoice([[*answers, tokenizer.encode(CODE)], answers], marker)


def grpo_settings(out: Path, **train: Any) -> dict[str, Any]:
    """GRPO of the tiny model on 3 synth items, 2 prompts x G=4 per step, all components on."""
    settings = {
        "output_dir": str(out),
        "max_steps": 3,
        "lr": 5e-3,
        "min_lr_ratio": 1.0,
        "save_every": 1,
        "progress_bar": False,
        "tensorboard": False,
    }
    settings.update(train)
    return {
        "model": {"path": "tiny"},
        "train": settings,
        "rollout": {
            "limit": 3,
            "prompts_per_step": 2,
            "group_size": 4,
            "concurrency": 8,
            "engine_batch_size": 8,
        },
        "agent": {
            "max_turns": 3,
            "max_new_tokens_per_turn": 40,
            "max_total_new_tokens": 96,
            "temperature": 1.0,
            "code_temperature": 0.0,
        },
        "rl": {"reward": "naar", "hgce": {"enabled": True}},
    }


def install_choice_processor() -> None:
    """Make every HFEngine built from now on sample through `choice_processor` (tests only)."""
    from beacon.engines.hf import HFEngine

    init = HFEngine.__init__

    def patched(self: HFEngine, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.logits_processors = [choice_processor(self.tokenizer)]

    HFEngine.__init__ = patched  # type: ignore[method-assign]
