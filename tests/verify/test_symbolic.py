"""check_math: math-verify inside threads, with our own budget, and the known snags."""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from math_verify import parse as mv_parse

from beacon.verify import check_math, symbolic
from beacon.verify.mathworker import MathWorkerPool, WorkerUnavailable
from beacon.verify.symbolic import run_with_budget


@pytest.mark.parametrize(
    ("pred", "gold", "expected"),
    [
        ("\\frac{1}{2}", "0.5", True),
        ("0.5", "\\frac{1}{2}", True),
        ("(x+1)^2", "x^2+2x+1", True),
        ("x^2+2x", "x^2+2x+1", False),
        ("\\sqrt{205}", "14.3", True),  # rounded to the gold's one decimal first
        ("14.32", "14.3", True),
        ("14.36", "14.3", False),
        ("11.79 km", "11.8", True),
        ("2191.7", "2191.7 metres", True),
        ("2\\pi", "2\\pi", True),
        ("6.2832", "2\\pi", False),  # math-verify compares 6 decimals
        ("S 23.5° W", "S 23.5 ^\\circ W", True),
        ("N 23.5° E", "S 23.5 ^\\circ W", False),
        ("230°T", "230 ^\\circ T", True),
        ("x = 3", "3", True),
    ],
)
def test_check_math(pred: str, gold: str, expected: bool) -> None:
    assert check_math(pred, gold) is expected


def test_bare_letter_gold_is_undecided() -> None:
    assert mv_parse("A", parsing_timeout=None) == []  # the snag: a letter parses to nothing
    assert check_math("B", "A") is None
    assert check_math("A", "A") is True  # equal as text


def test_interval_snag_is_real() -> None:
    parsed = mv_parse("$[2007, 2008]$", parsing_timeout=None)
    assert parsed and type(parsed[0]).__name__ == "Interval"


def test_works_inside_worker_threads() -> None:
    # math-verify's own signal-based timeouts raise outside the main thread.
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda g: check_math("\\frac{2}{4}", g), ["0.5"] * 4 + ["1/2"]))
    assert results == [True] * 5


def test_runaway_sympy_is_killed_and_the_helper_replaced() -> None:
    # 10^(10^10) makes sympy compute a huge integer power in C, holding the GIL: a thread
    # budget cannot stop this (the caller's join never returns); the helper process is killed.
    assert check_math("10^{10^{10}}", "\\frac{1}{2}", time_budget_s=1.0) is None
    assert check_math("0.5", "\\frac{1}{2}") is True


def test_forked_child_uses_its_own_helpers() -> None:
    assert check_math("0.5", "\\frac{1}{2}") is True  # the parent now holds a helper
    pid = os.fork()
    if pid == 0:  # child: the pool notices the fork and starts its own helpers
        ok = check_math("0.25", "\\frac{1}{4}") is True and check_math("3", "x+1") is False
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert check_math("0.75", "\\frac{3}{4}") is True


def test_helper_that_cannot_start_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    with pytest.raises(WorkerUnavailable):
        MathWorkerPool(size=1).check("1", "1", time_budget_s=1.0)


def test_falls_back_to_threads_without_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoHelpers:
        def check(self, pred: str, gold: str, time_budget_s: float) -> bool | None:
            raise WorkerUnavailable("no exec here")

    monkeypatch.setattr(symbolic, "_POOL", NoHelpers())
    monkeypatch.setattr(symbolic, "_helpers_unavailable", False)
    assert check_math("\\frac{2}{4}", "0.5") is True
    assert symbolic._helpers_unavailable is True
    assert check_math("(x+1)^2", "x^2+2x+1") is True


def test_thread_budget_abandons_a_blocked_check() -> None:
    release = threading.Event()
    try:
        result = run_with_budget(release.wait, time_budget_s=0.05)
        assert result is not True and result is not False
    finally:
        release.set()


def test_raising_check_is_undecided() -> None:
    def boom() -> bool:
        raise RuntimeError("sympy exploded")

    assert run_with_budget(boom, time_budget_s=5.0) not in (True, False)


def test_overlong_inputs_are_undecided() -> None:
    assert check_math("1" * 1000, "1") is None
