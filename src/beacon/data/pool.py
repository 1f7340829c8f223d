"""The pool items behind trajectories: the stages re-load samples for answers, options, images."""

from __future__ import annotations

from beacon.benchmarks import get_benchmark
from beacon.data.config import DataConfig
from beacon.types import Sample, Trajectory


def load_samples(cfg: DataConfig, trajectories: list[Trajectory]) -> dict[str, Sample]:
    """The pool samples behind `trajectories` (the hint check needs answers and options)."""
    wanted = {f"{t.metadata['benchmark']}/{t.sample_id}" for t in trajectories}
    out: dict[str, Sample] = {}
    for name in {t.metadata["benchmark"] for t in trajectories}:
        bench = get_benchmark(name)
        for sample in bench.load(
            path=cfg.pool.data.get(name), limit=cfg.pool.limit, seed=cfg.pool.seed
        ):
            if f"{name}/{sample.id}" in wanted:
                out[f"{name}/{sample.id}"] = sample
    missing = wanted - set(out)
    if missing:
        raise ValueError(
            f"{len(missing)} verified items are not in the pool (e.g. {sorted(missing)[0]}); "
            "the pool settings changed since `beacon data expert`: restore pool.*"
        )
    return out
