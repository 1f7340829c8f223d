"""One contract test over every registered benchmark (the lm-eval tests/test_tasks.py pattern).

Each benchmark loads its local copy (conftest.py); every sample must be well-formed, have a
prompt, score its own gold as correct and a wrong answer as incorrect, and give JSON-safe
record meta.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from beacon.benchmarks import get_benchmark, list_benchmarks
from beacon.types import Sample

ANSWER_TYPES = {"choice", "number", "yesno", "text", "math", "list"}


def test_every_registered_benchmark_has_a_local_copy(local_copy_names: set[str]) -> None:
    assert set(list_benchmarks()) == local_copy_names


def wrong_response(sample: Sample) -> str:
    """An answer that must be scored wrong for this sample."""
    gold = sample.answer
    if sample.answer_type == "choice" or (sample.answer_type == "math" and gold.isalpha()):
        letters = list(sample.options or {"A": "", "B": "", "C": "", "D": ""})
        return next(letter for letter in letters if letter != gold)
    if sample.answer_type == "yesno":
        return "no" if gold == "yes" else "yes"
    if sample.answer_type in ("number", "math"):
        return "987654321"
    if sample.answer_type == "list":
        return "[987654321]"
    return "zqxj wrong"


@pytest.mark.parametrize("name", list_benchmarks())
def test_benchmark_contract(name: str, local_copy) -> None:
    bench = get_benchmark(name)
    assert bench.name == name and bench.description
    assert isinstance(bench.categories, tuple)
    samples = list(bench.load(path=local_copy(name), limit=30, seed=0))
    assert samples, f"{name}: the local copy produced no samples"
    assert len({s.id for s in samples}) == len(samples), "sample ids must be unique"
    for sample in samples:
        assert isinstance(sample.id, str) and sample.id
        assert sample.benchmark == name
        assert sample.answer_type in ANSWER_TYPES
        assert isinstance(sample.answer, str) and sample.answer
        for image in sample.images:
            assert isinstance(image, Image.Image | Path | bytes)
        if sample.options is not None:
            assert list(sample.options) == list("ABCDEFGHIJ"[: len(sample.options)])
        if sample.answer_type == "choice":
            assert sample.answer in sample.options
        assert bench.prompt(sample).strip()
        gold = bench.score(f"<answer>{sample.answer}</answer>", sample)
        assert gold.correct, f"{name}/{sample.id}: gold {sample.answer!r} scored wrong: {gold}"
        wrong = bench.score(f"<answer>{wrong_response(sample)}</answer>", sample)
        assert not wrong.correct, f"{name}/{sample.id}: wrong answer scored right: {wrong}"
        json.dumps(bench.record_meta(sample))
        json.dumps({k: v for k, v in sample.metadata.items()})


@pytest.mark.parametrize("name", list_benchmarks())
def test_limit_and_empty_aggregate(name: str, local_copy) -> None:
    bench = get_benchmark(name)
    assert len(list(bench.load(path=local_copy(name), limit=1))) == 1
    assert bench.aggregate([]) == {}
