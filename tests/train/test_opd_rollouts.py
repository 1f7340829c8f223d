"""OPD collects its rollouts as GRPO and `beacon eval` do (`beacon.rollout`): the benchmark's
prompt (options included), the benchmark's scorer for the labels c_i, the shared seed rule, and
episodes that failed outside the model dropped and counted, never trained on. Each test drives
OPD's own `collect` on real parts (tiny student and teacher, HF engine, sandbox)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from beacon.benchmarks.base import Benchmark
from beacon.rollout import episode_seed, sample_key
from beacon.train.core.setup import make_accelerator
from beacon.train.opd.config import OPDConfig
from beacon.train.opd.recipe import build_parts
from beacon.train.opd.step import OPDParts, collect
from beacon.types import Sample
from beacon.verify import Verdict

from .opd_helpers import opd_settings

SEED = 5


class OptionsBench(Benchmark):
    """Two choice items whose prompt lists the options, scored by a rule of its own: any
    response that wrote something is right (the generic verifier would say wrong)."""

    name = "opd_rollout_options"

    def load(self, path: Any = None, limit: int | None = None, seed: int = 0) -> Iterator[Sample]:
        for i in range(2):
            yield Sample(
                id=f"o{i}",
                images=[Image.new("RGB", (32, 24), "white")],
                question=f"Which shape is drawn in picture {i}?",
                answer="A",
                options={"A": "a circle", "B": "a triangle"},
                answer_type="choice",
                benchmark=self.name,
            )

    def score(self, response: str, sample: Sample, *, judge: Any = None) -> Verdict:
        return Verdict(correct=bool(response), score=1.0, parsed=True, prediction=response[:8])


@pytest.fixture(autouse=True)
def options_bench(monkeypatch: pytest.MonkeyPatch) -> None:
    """`OptionsBench` registered for these tests only (the registry's contract tests run over
    every registered benchmark)."""
    from beacon.benchmarks import base

    monkeypatch.setitem(base._REGISTRY, OptionsBench.name, OptionsBench)


@contextlib.contextmanager
def opd_parts(student: Path, teacher: Path, out: Path) -> Iterator[OPDParts]:
    settings = opd_settings(student, teacher, out, teacher__context="base")
    settings["data"] = {"benchmark": OptionsBench.name, "limit": 2}
    settings["rollout"]["group_size"] = 2
    settings["rollout"]["agent"].update(max_new_tokens_per_turn=6, max_total_new_tokens=6)
    settings["train"]["seed"] = SEED
    cfg = OPDConfig.model_validate(settings)
    with contextlib.ExitStack() as stack:
        parts = build_parts(cfg, make_accelerator(cfg.model, cfg.train), out, stack)
        yield parts


def recorded_specs(parts: OPDParts) -> list[Any]:
    """The agent loop's `run`, wrapped to keep the episode specs OPD asks for."""
    loop, specs = parts.rollouts.loop, []
    run = loop.run

    def keep(batch: list[Any], **kwargs: Any) -> list[Any]:
        specs.extend(batch)
        return run(batch, **kwargs)

    loop.run = keep
    return specs


@pytest.mark.slow
def test_opd_prompts_hold_the_options_and_seeds_follow_the_shared_rule(
    tiny_model_path: Path, teacher_path: Path, tmp_path: Path
) -> None:
    bench = OptionsBench()
    with opd_parts(tiny_model_path, teacher_path, tmp_path / "run") as parts:
        specs = recorded_specs(parts)
        distilled, _ = collect(parts, parts.samples, [0, 1], step=3)
    assert len(specs) == 4 and len(distilled) == 2
    for spec in specs:
        assert spec.question == bench.prompt(spec.sample)
        key = sample_key(bench.name, spec.sample.id, "tool", spec.k)
        assert spec.seed == episode_seed(SEED, f"3/{key}")  # GRPO's rule for step 3
    prompt = distilled[0].group.trajectories[0].segments[0].text
    assert "a circle" in prompt and "a triangle" in prompt


@pytest.mark.slow
def test_opd_labels_come_from_the_benchmark_scorer(
    tiny_model_path: Path, teacher_path: Path, tmp_path: Path
) -> None:
    with opd_parts(tiny_model_path, teacher_path, tmp_path / "run") as parts:
        distilled, _ = collect(parts, parts.samples, [0, 1], step=1)
    for d in distilled:
        assert d.labels == [bool(t.generated_text) for t in d.group.trajectories]
        assert all(d.labels)  # the generic verifier finds no option in random text


@pytest.mark.slow
def test_opd_drops_and_counts_episodes_that_failed_outside_the_model(
    tiny_model_path: Path, teacher_path: Path, tmp_path: Path
) -> None:
    with opd_parts(tiny_model_path, teacher_path, tmp_path / "run") as parts:
        loop = parts.rollouts.loop
        run = loop.run

        def one_sandbox_failure(batch: list[Any], **kwargs: Any) -> list[Any]:
            out = run(batch, **kwargs)
            out[0].finish_reason, out[0].error = "sandbox_error", "sandbox session failed"
            return out

        loop.run = one_sandbox_failure
        distilled, stats = collect(parts, parts.samples, [0, 1], step=1)
    assert stats.failed == {"sandbox_error": 1}
    assert [len(d.encoded) for d in distilled] == [1, 2]  # the failed episode is not trained on
    assert all(t.error is None for d in distilled for t in d.group.trajectories)
