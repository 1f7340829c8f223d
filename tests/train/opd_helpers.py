"""Helpers of the OPD tests: a small OPD config on synth with the scripted critic."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def opd_settings(student: Path, teacher: Path, out: Path, **sets: Any) -> dict[str, Any]:
    """A tiny OPD config: 2 items x M=4 per step, short episodes, the scripted critic."""
    cfg: dict[str, Any] = {
        "model": {"path": str(student)},
        "teacher": {"path": str(teacher), "reencode_check": False},
        "teacher_check": {"enabled": False},  # two random models: test_opd_teacher.py checks it
        "data": {"benchmark": "synth", "limit": 4},
        "rollout": {
            "group_size": 4,
            "items_per_step": 2,
            "agent": {
                "temperature": 1.0,
                "top_p": 0.9,
                "top_k": 50,
                "code_temperature": 0.0,
                "max_turns": 2,
                "max_new_tokens_per_turn": 12,
                "max_total_new_tokens": 24,
            },
        },
        "critic": {"kind": "scripted"},
        "revue": {"critic_timeout_s": 20.0, "critic_retries": 0},
        "train": {
            "output_dir": str(out),
            "max_steps": 2,
            "lr": 1e-3,
            "save_every": 1,
            "progress_bar": False,
        },
    }
    for key, value in sets.items():
        section, name = key.split("__")
        cfg.setdefault(section, {})[name] = value
    return cfg
