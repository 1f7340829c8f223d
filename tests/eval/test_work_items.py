"""Which episodes an eval run schedules (`beacon.eval.runner.work_items`), and how much of each
benchmark it reads to find them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from beacon.benchmarks import get_benchmark
from beacon.eval.config import EvalConfig
from beacon.eval.runner import work_items
from beacon.types import Sample


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many samples each benchmark's loader has yielded."""
    seen: dict[str, int] = {}
    for name in ("synth", "synth_demo_hinted"):
        bench = type(get_benchmark(name))
        original = bench.load

        def load(self, *args, _original=original, **kwargs) -> Iterator[Sample]:
            for sample in _original(self, *args, **kwargs):
                seen[self.name] = seen.get(self.name, 0) + 1
                yield sample

        monkeypatch.setattr(bench, "load", load)
    return seen


def test_ids_stop_the_load_at_the_last_wanted_item(counted: dict[str, int]) -> None:
    cfg = EvalConfig(
        benchmarks=["synth", "synth_demo_hinted"],
        limit=40,
        ids={"synth": ["3", "1"], "synth_demo_hinted": ["0"]},
        modes=["tool", "notool"],
    )
    keys = [item.key for item in work_items(cfg, done={"synth/1/notool/0"})]
    assert keys == [
        "synth/1/tool/0",
        "synth/3/tool/0",
        "synth/3/notool/0",
        "synth_demo_hinted/0/tool/0",
        "synth_demo_hinted/0/notool/0",
    ]
    # read up to item 3 of synth, item 0 of the hinted items: not 40 renders of each
    assert counted == {"synth": 4, "synth_demo_hinted": 1}


def test_ids_that_are_not_there_read_the_whole_limit(counted: dict[str, int]) -> None:
    cfg = EvalConfig(benchmarks=["synth"], limit=6, ids={"synth": ["2", "missing"]})
    assert [item.key for item in work_items(cfg, done=set())] == [
        "synth/2/tool/0",
        "synth/2/notool/0",
    ]
    assert counted == {"synth": 6}


def test_a_benchmark_without_ids_is_not_read(counted: dict[str, int]) -> None:
    cfg = EvalConfig(benchmarks=["synth", "synth_demo_hinted"], limit=6, ids={"synth": ["0"]})
    assert [item.key for item in work_items(cfg, done=set())] == [
        "synth/0/tool/0",
        "synth/0/notool/0",
    ]
    assert counted == {"synth": 1}
