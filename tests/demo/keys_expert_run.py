"""A real eval run of the demo's scripted expert on `synth_keys` items, for tests that need its
episodes (the expert's crops, the told teacher rows)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from beacon.data.scripted_expert import create_scripted_app
from beacon.demo.expert import MODEL_NAME, ScriptedDemoExpert, keys_agent
from beacon.engines.config import EngineConfig
from beacon.engines.serve import run_app_in_thread
from beacon.eval.config import EvalConfig
from beacon.eval.runner import run_eval
from beacon.types import Sample


def keys_expert_run(
    items: Iterable[Sample],
    benchmarks: list[str],
    limit: int,
    seed: int,
    out: Path,
    samples: int = 1,
) -> Path:
    """The scripted expert, served over HTTP, answers `benchmarks` (first `limit` items of
    `seed`, which `items` must hold) in tool mode, `samples` episodes per item (> 1: at
    temperature 1, as the demo's sampled runs; the expert answers each the same); the run
    folder `out`."""
    server = run_app_in_thread(
        create_scripted_app(ScriptedDemoExpert(list(items)), model_name=MODEL_NAME)
    )
    agent = keys_agent()
    if samples > 1:
        agent = agent.model_copy(update={"temperature": 1.0})
    try:
        engine = EngineConfig(name="openai", model=MODEL_NAME, base_url=server.base_url)
        config = EvalConfig(
            engine=engine,
            agent=agent,
            benchmarks=benchmarks,
            limit=limit,
            modes=["tool"],
            samples=samples,
            seed=seed,
            concurrency=2,
            bootstrap=0,
            report=False,
            out=str(out),
        )
        run_eval(config, progress=False)
    finally:
        server.stop()
    return out
