"""The one resumable stage runner: the data pipeline (`beacon data all`), RFT (`beacon train
rft`) and the demo (`beacon demo`) run their stages through `run_stages`.

A stage is a name, the work (`run`) and a test of whether that work is finished (`done`), read
from what the work itself leaves in its folder: its run summary (`beacon.runfolder.read_summary`)
or a trainer's final checkpoint. The runner runs the stages not done, in order, logging
``[i/N] name`` before each, ``[i/N] name: already done`` for a finished one and
``[i/N] name: done in S s (M min so far)`` after each; `on_done` receives each finished stage
with what its `run` returned and its wall time, to record them (RFT's counts in `summary.json`,
the demo's `timings.json`). A stage killed midway is not done, so a rerun starts it again and it
resumes from its own records (an eval run's samples, a trainer's newest checkpoint).

Jobs (the demo's GRPO runs and OPD variants, each with its evaluation; its trainings): a
stage may name the `job` it belongs to. A stretch of consecutive stages with jobs goes to a
`Pool` of `size` processes, one job per process at a time, its stages in order; every other
stage runs in this process. A stretch of one job runs in a process of its own too: a training's
memory (its processed images, the allocator's high-water mark) goes back when its process ends,
where in this process it would stay until the pipeline's end (the full demo's process held
16 GB by its last stages when its three SFT runs ran here). The pool's processes die with this
one (`PR_SET_PDEATHSIG`), so a `kill -9` leaves nothing writing into the run folders. They are
started by "spawn": a script that calls a runner with a pool needs the usual
``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Stage:
    """One step of a pipeline; `done()` is true once its output is complete."""

    name: str
    run: Callable[[], Any]
    done: Callable[[], bool]
    job: str | None = None
    """The run this stage belongs to (a GRPO run, an OPD variant): a job's stages run in order,
    in one process, beside other jobs' when the runner has a `Pool`."""
    waits: bool = False
    """Start a new stretch here: this stage runs only after every stage before it, even when the
    stage before it is another job's (the demo's ReVuE teacher starts from the GRPO runs)."""


OnDone = Callable[[Stage, Any, float], None]
"""Called with a finished stage, what its `run` returned (None for a pool's stage) and its wall
time in seconds."""


@dataclass(frozen=True)
class Pool:
    """How stretches of jobs run: `size` processes at once. Both callables cross into spawned
    processes, so they are module-level functions (or `functools.partial`s of them)."""

    size: int
    run_job: Callable[[str], dict[str, float]]
    """In a pool process: run `job`'s unfinished stages (with `run_stages`), return each one's
    wall time by stage name."""
    start: Callable[[int], None] | None = None
    """In each pool process, once, with the number of processes: its own settings (threads)."""


def run_stages(
    stages: Sequence[Stage],
    log: Callable[[str], None] = logger.info,
    on_done: OnDone | None = None,
    pool: Pool | None = None,
) -> None:
    """Run the stages not done, in order (stretches of jobs in `pool`'s processes); log progress
    lines to `log`; pass each finished stage to `on_done`."""
    _Runner(list(stages), log, on_done, pool).run()


class _Runner:
    def __init__(
        self,
        stages: list[Stage],
        log: Callable[[str], None],
        on_done: OnDone | None,
        pool: Pool | None,
    ) -> None:
        self.stages, self.log, self.on_done, self.pool = stages, log, on_done, pool
        self.start = time.perf_counter()

    def run(self) -> None:
        i = 0
        while i < len(self.stages):
            end = i + 1
            if self.stages[i].job is not None:
                while end < len(self.stages) and self._joins(end):
                    end += 1
            todo = self._skip_done(range(i, end))
            jobs = list(dict.fromkeys(self.stages[n].job for n in todo))
            if self.pool is not None and todo and self.stages[i].job is not None:
                self._run_beside(self.pool, todo, jobs)
            else:
                for n in todo:
                    self.log(f"{self._tag(n)} {self.stages[n].name}")
                    began = time.perf_counter()
                    result = self.stages[n].run()
                    self._finished(n, result, time.perf_counter() - began)
            i = end

    def _joins(self, n: int) -> bool:
        """Stage `n` belongs to the stretch of jobs before it."""
        return self.stages[n].job is not None and not self.stages[n].waits

    def _skip_done(self, numbers: range) -> list[int]:
        todo = []
        for n in numbers:
            if self.stages[n].done():
                self.log(f"{self._tag(n)} {self.stages[n].name}: already done")
            else:
                todo.append(n)
        return todo

    def _run_beside(self, pool: Pool, todo: list[int], names: list[str | None]) -> None:
        """Each job's stages of `todo` in a pool process, `pool.size` jobs at a time."""
        size = min(pool.size, len(names))
        queue = [(job, [n for n in todo if self.stages[n].job == job]) for job in names]
        executor = ProcessPoolExecutor(
            size,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_start_worker,
            initargs=(pool.start, size),
        )
        going: dict[Future, list[int]] = {}
        try:
            while queue or going:
                while queue and len(going) < size:
                    job, numbers = queue.pop(0)
                    titles = " + ".join(self.stages[n].name for n in numbers)
                    where = f"{size} at once" if size > 1 else "in a pool process"
                    self.log(f"{self._tag(numbers[0])} {titles} ({where})")
                    going[executor.submit(pool.run_job, job)] = numbers
                finished, _ = wait(going, return_when=FIRST_COMPLETED)
                for future in finished:
                    try:
                        took = future.result()
                    except BrokenProcessPool as exc:
                        raise RuntimeError(
                            "a process running jobs side by side died (out of memory? "
                            "killed?); rerun to resume, with one job at a time (for the demo: "
                            "--set jobs=1)"
                        ) from exc
                    for n in going.pop(future):
                        if self.stages[n].name in took:  # else finished meanwhile elsewhere
                            self._finished(n, None, took[self.stages[n].name])
        finally:
            executor.shutdown(wait=True, cancel_futures=True)

    def _finished(self, n: int, result: Any, took: float) -> None:
        total = (time.perf_counter() - self.start) / 60
        self.log(
            f"{self._tag(n)} {self.stages[n].name}: done in {took:.0f} s ({total:.1f} min so far)"
        )
        if self.on_done is not None:
            self.on_done(self.stages[n], result, took)

    def _tag(self, n: int) -> str:
        return f"[{n + 1}/{len(self.stages)}]"


def _start_worker(start: Callable[[int], None] | None, size: int) -> None:
    """A pool process: dies with the process that started the pool, then `start(size)`."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        parent = multiprocessing.parent_process()
        if parent is not None and os.getppid() != parent.pid:  # the parent died before that
            os._exit(1)
    if start is not None:
        start(size)
