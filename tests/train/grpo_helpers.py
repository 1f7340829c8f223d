"""Helpers of the GRPO tests: a small GRPO config, and the scripted-choice sampler that gives the
random tiny model a real choice between a few responses (so rewards vary within a group)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from beacon.fakes.logits import ScriptChoice, synth_choices

# synth (seed 0) items 0 and 1 answer 49E and 93V; item 2 (72) is never answered right.
ANSWERS = ("49E", "93V")


def choice_processor(tokenizer: Any) -> ScriptChoice:
    """Turn 0: answer 49E, answer 93V, or crop; turn 1 (after the crop): one of the answers."""
    return synth_choices(tokenizer, ANSWERS)


def choice_processors(tokenizer: Any) -> list[ScriptChoice]:
    """The rollout engine's processors (`run_grpo(cfg, logits_processors=choice_processors)`)."""
    return [choice_processor(tokenizer)]


def grpo_settings(out: Path, **train: Any) -> dict[str, Any]:
    """GRPO of the tiny model on 3 synth items, 2 prompts x G=4 per step, all components on."""
    settings = {
        "output_dir": str(out),
        "max_steps": 3,
        "lr": 5e-3,
        "min_lr_ratio": 1.0,
        "save_every": 1,
        "progress_bar": False,
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
