"""Data-pipeline fixtures: the scripted synth expert over real HTTP, and a pipeline config."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from beacon import configs
from beacon.data.config import DataConfig, load_data_config
from beacon.data.scripted_expert import MODEL_NAME, ScriptedSynthExpert, create_scripted_app
from beacon.engines.serve import ServerHandle, run_app_in_thread
from beacon.jsonl import write_jsonl_atomic

POOL = 6  # synth items 0..5: one of each category, plus a second small_text


@pytest.fixture()
def scripted_server() -> Iterator[Callable[..., ServerHandle]]:
    """`scripted_server(leaky=False, delay_s=0)`: start one; all are stopped after the test."""
    handles: list[ServerHandle] = []

    def start(leaky: bool = False, delay_s: float = 0.0) -> ServerHandle:
        expert = ScriptedSynthExpert(seed=0, count=POOL, leaky=leaky)
        handle = run_app_in_thread(create_scripted_app(expert, delay_s=delay_s))
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        handle.stop()


SHIPPED = configs.config_path("synth_tiny")


def overrides(out: Path, base_url: str, *extra: str) -> list[str]:
    """`--set` values for a small pipeline: pool of POOL synth items, expert at `base_url`."""
    return [
        f"out={out}",
        f"pool.limit={POOL}",
        "difficulty.k=2",
        "difficulty.max_correct=1",
        "difficulty.agent.max_new_tokens_per_turn=12",
        "difficulty.agent.max_total_new_tokens=12",
        "difficulty.concurrency=6",
        f"expert.engine.base_url={base_url}",
        f"expert.engine.model={MODEL_NAME}",
        "expert.engine.max_retries=0",
        *extra,
    ]


def data_config(out: Path, base_url: str, *extra: str) -> DataConfig:
    """The shipped synth config with `overrides` applied."""
    return load_data_config(SHIPPED, overrides(out, base_url, *extra))


def select_all(cfg: DataConfig) -> None:
    """Write difficulty/selected.jsonl naming every pool item (skips the base-model run)."""
    rows = [{"benchmark": "synth", "sample_id": str(i), "correct": 0} for i in range(POOL)]
    write_jsonl_atomic(cfg.root / "difficulty" / "selected.jsonl", rows)
