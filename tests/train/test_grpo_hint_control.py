"""The HGCE control arm end to end: GRPO on the tiny model and `synth_keys_keyed` items, with
`rollout.hints` pointing at a cache of `uninformative_hint_rows`. The rollout engine is steered
(`HintGate`) so that un-hinted rollouts never answer right and rollouts sampled with the
uninformative hint in their prompt can: a rescued group shows the hint text reached the prompt.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from beacon.benchmarks import get_benchmark
from beacon.benchmarks.synth_keys import UNINFORMATIVE_HINT, uninformative_hint_rows
from beacon.fakes.logits import HintGate, ScriptChoice
from beacon.jsonl import read_jsonl
from beacon.train.core.metrics import read_metrics
from beacon.train.grpo.config import GRPOConfig
from beacon.train.grpo.recipe import HGCE_LOG, run_grpo

from .grpo_helpers import grpo_settings

BENCH = "synth_keys_keyed"


def _crop(box: list[int]) -> str:
    return f"Zoom. <code>\n```python\nimage.crop(({', '.join(map(str, box))})).show()\n```\n</code>"


def _processors(samples: list[Any]) -> Any:
    """Turn 0 crops the key or cell 1 (or, un-hinted, answers `x`); after a crop, un-hinted
    rollouts answer `x` (always wrong) and hinted ones one of the items' answers."""
    meta = samples[0].metadata
    crops = [_crop(meta["key_box"]), _crop(meta["cell_boxes"][0])]
    answers = sorted({s.answer for s in samples} | ({"x"} if len(samples) < 2 else set()))

    def factory(tokenizer: Any) -> list[HintGate]:
        def encode(texts: list[str]) -> list[list[int]]:
            return [tokenizer.encode(t) for t in texts]

        marker = tokenizer.encode("</sandbox_output>")[0]
        wrong = encode(["<answer>x</answer>"])
        right = encode([f"<answer>{a}</answer>" for a in answers])
        plain = ScriptChoice([[*encode(crops), *wrong], wrong], marker)
        hinted = ScriptChoice([encode(crops), right], marker)
        hint = tokenizer.encode(" carefully before you answer")
        return [HintGate(hint, hinted, plain)]

    return factory


@pytest.mark.slow
def test_uninformative_hint_arm_runs_hgce_and_logs_its_lines(tmp_path: Path) -> None:
    samples = list(get_benchmark(BENCH).load(limit=2))
    assert len({s.answer for s in samples}) == 2  # each hinted rollout can be right or wrong
    cache = tmp_path / "hints.jsonl"
    cache.write_text("".join(json.dumps(r) + "\n" for r in uninformative_hint_rows(samples)))
    settings = grpo_settings(tmp_path / "run", max_steps=2, save_every=10)
    settings["rollout"].update(benchmark=BENCH, limit=2, hints=str(cache))
    settings["agent"].update(max_new_tokens_per_turn=48, max_total_new_tokens=120)
    run_grpo(GRPOConfig.model_validate(settings), logits_processors=_processors(samples))

    hinted = list(read_jsonl(tmp_path / "run" / HGCE_LOG))
    assert hinted and {h["hint"] for h in hinted} == {UNINFORMATIVE_HINT}  # not KEYED_HINT
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert all(m["rl/accuracy"] == 0 for m in metrics)  # every un-hinted group all wrong
    assert all(m["rl/groups_hinted"] == 2 for m in metrics)
    rescued = [m for m in metrics if m["rl/groups_rescued"] > 0]
    assert rescued  # right answers only where the hint's tokens were in the prompt
    for m in rescued:
        assert m["rl/hint_tokens"] > 0 and m["rl/hint_tokens_coords"] > 0
        assert math.isfinite(m["rl/hint_log_ratio"]) and m["rl/hint_log_ratio"] != 0
        assert math.isfinite(m["rl/hint_log_ratio_coords"])
        assert m["rl/hint_tokens_pos"] + m["rl/hint_tokens_neg"] == m["rl/hint_tokens"]
        for sign in ("pos", "neg"):
            assert 0 <= m[f"rl/hint_clipped_{sign}"] <= 1
    for m in metrics:  # the un-hinted rollouts of items that name a decision box
        assert m["rl/decision_rollouts"] == 2 * 4 and 0 <= m["rl/decision_rate"] <= 1
    assert any(0 < m["rl/decision_rate"] < 1 for m in metrics)  # key crops and cell crops
