"""The one stage runner (`beacon.stages`): unfinished stages in order, finished ones skipped,
each finished stage handed to `on_done`, stretches of jobs run in a pool of processes."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import pytest

from beacon.runfolder import read_summary, write_summary
from beacon.stages import Pool, Stage, run_stages


def summary_stage(folder: Path, ran: list[str]) -> Stage:
    """A stage that is done once its folder holds a summary, as the product's stages are."""

    def run() -> str:
        ran.append(folder.name)
        write_summary(folder, {"stage": folder.name})
        return folder.name

    return Stage(folder.name, run, lambda: bool(read_summary(folder)))


def test_runs_unfinished_stages_in_order_and_skips_finished_ones(tmp_path: Path) -> None:
    ran: list[str] = []
    lines: list[str] = []
    finished: list[tuple[str, str]] = []
    stages = [summary_stage(tmp_path / name, ran) for name in ("a", "b", "c")]
    write_summary(tmp_path / "b", {"stage": "b"})  # finished by an earlier, killed run

    def on_done(stage: Stage, result: str, seconds: float) -> None:
        assert seconds >= 0
        finished.append((stage.name, result))

    run_stages(stages, log=lines.append, on_done=on_done)
    assert ran == ["a", "c"]
    assert finished == [("a", "a"), ("c", "c")]
    assert lines[:2] == ["[1/3] a", lines[1]] and lines[1].startswith("[1/3] a: done in ")
    assert lines[2] == "[2/3] b: already done"
    assert lines[3] == "[3/3] c"

    lines.clear()
    run_stages(stages, log=lines.append, on_done=on_done)  # a rerun: everything is done
    assert ran == ["a", "c"]
    assert lines == [f"[{i}/3] {name}: already done" for i, name in enumerate("abc", 1)]


def test_a_failing_stage_stops_the_run_and_is_not_done(tmp_path: Path) -> None:
    """A stage that fails (or is killed) leaves no summary: the next run starts it again."""
    ran: list[str] = []

    def fail() -> None:
        raise RuntimeError("boom")

    stages = [
        summary_stage(tmp_path / "a", ran),
        Stage("b", fail, lambda: bool(read_summary(tmp_path / "b"))),
        summary_stage(tmp_path / "c", ran),
    ]
    with pytest.raises(RuntimeError, match="boom"):
        run_stages(stages)
    assert ran == ["a"]
    stages[1] = summary_stage(tmp_path / "b", ran)
    run_stages(stages)
    assert ran == ["a", "b", "c"]


WORKER = """
import os
from pathlib import Path


def start(folder, workers):
    Path(folder, f"started-{os.getpid()}").write_text(str(workers))


def run_job(folder, job):
    Path(folder, job).write_text(str(os.getpid()))
    return {f"{job} train": 1.0, f"{job} evaluate": 2.0}
"""


def test_jobs_run_beside_each_other_in_pool_processes(tmp_path: Path, monkeypatch) -> None:
    """Consecutive stages with jobs go to the pool, one job per process call, the others run
    here; a job's stages are reported finished with the times the pool process measured."""
    (tmp_path / "stage_worker.py").write_text(WORKER)
    monkeypatch.syspath_prepend(str(tmp_path))  # spawned processes get this process's sys.path
    import stage_worker

    out = tmp_path / "out"
    out.mkdir()
    ran: list[str] = []
    stages = [summary_stage(out / "first", ran)]
    for job in ("x", "y", "z"):
        stages += [
            Stage(f"{job} train", lambda: None, lambda: False, job=job),
            Stage(f"{job} evaluate", lambda: None, lambda: False, job=job),
        ]
    stages.append(summary_stage(out / "last", ran))
    lines: list[str] = []
    times: dict[str, float] = {}
    pool = Pool(2, partial(stage_worker.run_job, str(out)), partial(stage_worker.start, str(out)))
    run_stages(
        stages,
        log=lines.append,
        on_done=lambda stage, _result, seconds: times.update({stage.name: seconds}),
        pool=pool,
    )
    assert ran == ["first", "last"]
    assert "[2/8] x train + x evaluate (2 at once)" in lines
    pids = {(out / job).read_text() for job in ("x", "y", "z")}
    assert str(os.getpid()) not in pids
    started = sorted(out.glob("started-*"))
    assert 1 <= len(started) <= 2 and all(p.read_text() == "2" for p in started)
    assert {name: times[name] for name in times if name.endswith("evaluate")} == {
        "x evaluate": 2.0,
        "y evaluate": 2.0,
        "z evaluate": 2.0,
    }
    order = list(times)
    assert order[0] == "first" and order[-1] == "last" and len(order) == 8


def test_a_lone_job_runs_in_a_process_of_its_own_and_waits_starts_a_new_stretch(
    tmp_path: Path, monkeypatch
) -> None:
    """One job alone still leaves this process (its memory goes back when it ends); a stage
    with `waits` starts a new stretch, so its job runs only after every job before it."""
    (tmp_path / "stage_worker.py").write_text(WORKER)
    monkeypatch.syspath_prepend(str(tmp_path))
    import stage_worker

    out = tmp_path / "out"
    out.mkdir()
    stages = [
        Stage("x train", lambda: None, lambda: False, job="x"),
        Stage("x evaluate", lambda: None, lambda: False, job="x"),
        Stage("y train", lambda: None, lambda: False, job="y", waits=True),
        Stage("z train", lambda: None, lambda: False, job="z"),
    ]
    lines: list[str] = []
    pool = Pool(2, partial(stage_worker.run_job, str(out)), partial(stage_worker.start, str(out)))
    run_stages(stages, log=lines.append, pool=pool)
    starts = [line for line in lines if "so far" not in line]
    assert starts == [
        "[1/4] x train + x evaluate (in a pool process)",
        "[3/4] y train (2 at once)",
        "[4/4] z train (2 at once)",
    ]
    assert str(os.getpid()) != (out / "x").read_text()
    assert lines.index("[2/4] x evaluate: done in 2 s (0.0 min so far)") < lines.index(starts[1])
