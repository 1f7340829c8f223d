"""Health alarms (`beacon.train.core.health`) on crafted metric streams: each alarm fires on the
failure it names and not on a healthy run, prints one warning line per firing streak, and a
resumed monitor continues where it was."""

from __future__ import annotations

import logging
import math

import pytest

from beacon.train.core.config import HealthConfig
from beacon.train.core.health import HealthMonitor


def stream(monitor: HealthMonitor, key: str, values: list[float]) -> list[int]:
    """The flag of the alarm on `key` at each step (None where it was not evaluated)."""
    flags = []
    for step, value in enumerate(values, 1):
        metrics = {"step": step, key: value}
        monitor.check(metrics)
        flags.append(next((v for k, v in metrics.items() if k.startswith("health/alarm/")), None))
    return flags


def test_tool_rate_collapse_fires_on_a_fall_to_zero_and_not_on_a_model_that_never_used_tools(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rates = [0.6, 0.5, 0.3, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    with caplog.at_level(logging.WARNING):
        flags = stream(HealthMonitor(HealthConfig(window=3)), "health/tool_rate", rates)
    # rolling means (window 3): 0.6, 0.55, 0.47, 0.3, 0.13, 0.033, then 0 from step 7
    assert flags == [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
    (line,) = [r.getMessage() for r in caplog.records]  # one line for the whole streak
    assert line.startswith("health alarm tool_rate_collapse at step 7: rolling mean of")
    assert "health/tool_rate = 0 < 0.02" in line and "rl.hgce.enabled" in line
    never = stream(HealthMonitor(HealthConfig(window=3)), "health/tool_rate", [0.0] * 8)
    assert never == [0] * 8


def test_tool_use_saturating_on_easy_items_fires() -> None:
    flags = stream(HealthMonitor(HealthConfig(window=2)), "health/tool_rate_easy", [0.5, 1, 1, 1])
    assert flags == [0, 0, 1, 1]  # rolling means 0.5, 0.75, 1, 1 against 0.95


def test_each_threshold_fires_on_its_side_and_null_turns_it_off() -> None:
    cfg = HealthConfig(window=1)
    assert stream(HealthMonitor(cfg), "health/sampler_logprob_gap", [1e-6, 0.3]) == [0, 1]
    assert stream(HealthMonitor(cfg), "health/zero_variance_groups", [0.5, 1.0]) == [0, 1]
    assert stream(HealthMonitor(cfg), "health/entropy", [1.2, 0.01]) == [0, 1]
    assert stream(HealthMonitor(cfg), "health/dropped_share", [0.0, 0.25]) == [0, 1]
    off = HealthConfig(window=1, logprob_gap_max=None)
    assert stream(HealthMonitor(off), "health/sampler_logprob_gap", [5.0]) == [0]


def test_teacher_student_gap_fires_when_it_grows_past_its_first_full_window() -> None:
    gaps = [1.0, 1.0, 0.2, 0.2, 1.2, 1.2, 1.4, 1.6]
    cfg = HealthConfig(teacher_student_gap_window=2, teacher_student_gap_growth=1.3)
    flags = stream(HealthMonitor(cfg), "health/teacher_student_gap", gaps)
    # rolling means 1.0 (the baseline), 1.0, 0.6, 0.2, 0.7, 1.2, 1.3, 1.5 against 1.3 x 1.0: a
    # dip below the start is not a new baseline (a baseline of the lowest mean, 0.2, would fire
    # from step 5 on)
    assert flags == [0, 0, 0, 0, 0, 0, 0, 1]


def test_teacher_student_gap_starting_at_or_below_zero_is_held_to_the_floor() -> None:
    """The k1 estimate can be negative: a baseline <= 0 does not turn the alarm off."""
    gaps = [-0.002, 0.0, 0.005, 0.02, 0.03]
    cfg = HealthConfig(teacher_student_gap_window=2)
    # rolling means -0.002, -0.001 (the baseline), 0.0025, 0.0125, 0.025 against the 0.01 floor
    assert stream(HealthMonitor(cfg), "health/teacher_student_gap", gaps) == [0, 0, 0, 1, 1]


def test_teacher_student_gap_uses_its_own_window() -> None:
    monitor = HealthMonitor(HealthConfig(window=5, teacher_student_gap_window=30))
    assert monitor.series["teacher_student_gap_growth"].window == 30
    assert monitor.series["entropy_collapse"].window == 5


def test_teacher_student_gap_of_float_noise_does_not_fire() -> None:
    """Teacher = student: gaps of ~1e-8 that double are still agreement (the floor)."""
    gaps = [4e-9, 4e-9, 1e-8, 2e-8, 4e-8]
    one = HealthConfig(teacher_student_gap_window=1)
    assert stream(HealthMonitor(one), "health/teacher_student_gap", gaps) == [0, 0, 0, 0, 0]
    no_floor = HealthConfig(teacher_student_gap_window=1, teacher_student_gap_floor=0.0)
    assert stream(HealthMonitor(no_floor), "health/teacher_student_gap", gaps)[-1] == 1


def test_missing_or_undefined_values_are_not_evaluated() -> None:
    metrics = {"step": 1, "health/tool_rate_hard": 1.0, "health/entropy": math.nan}
    HealthMonitor(HealthConfig()).check(metrics)
    assert metrics["health/alarms"] == 0
    assert not [k for k in metrics if k.startswith("health/alarm/")]


def test_a_replayed_monitor_continues_the_uninterrupted_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Resume: the windows and the firing state come back from the logged metrics, so the
    alarm that was firing is not announced again and the next flags are the same."""
    rates = [0.6, 0.4, 0.0, 0.0, 0.0, 0.0, 0.0]
    straight = stream(HealthMonitor(HealthConfig(window=2)), "health/tool_rate", rates)
    history = [{"step": s, "health/tool_rate": v} for s, v in enumerate(rates[:5], 1)]
    resumed = HealthMonitor(HealthConfig(window=2))
    resumed.replay(history)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        rest = [stream_step(resumed, s, v) for s, v in enumerate(rates[5:], 6)]
    assert straight[4] == 1 and rest == straight[5:]
    assert not caplog.records


def stream_step(monitor: HealthMonitor, step: int, value: float) -> int:
    metrics = {"step": step, "health/tool_rate": value}
    monitor.check(metrics)
    return metrics["health/alarm/tool_rate_collapse"]
