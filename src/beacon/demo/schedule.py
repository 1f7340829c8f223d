"""Running the demo's stages: in order, except that its GRPO runs and OPD variants (each
with its evaluation: a *job*) run `jobs` at a time.

A GRPO or OPD run of the demo model is mostly generation and sandbox calls, whose per-token and
per-call Python work keeps one core busy while the other idles (~27% of the machine idle
during GRPO on 2 cores). Two 8-step GRPO runs side by side, each in a process of its own with
one torch thread, took 33.9 s instead of 48.8 s one after the other. So a stretch of jobs goes
to a pool of `jobs` processes (started once per stretch); every other stage runs in this
process. Results do not depend on it beyond float rounding: a run's losses with one torch
thread or two agree to ~1e-7 (reductions split differently), and in 10-step runs the rewards
and evaluations came out identical.

Each stage resumes on its own, as in order: a finished one is skipped, an unfinished training
run resumes from its newest checkpoint. The pool's processes die with this one
(`PR_SET_PDEATHSIG`), so a `kill -9` of the demo leaves no run going on in its folder. The
pool starts processes by "spawn": a script that calls `run_demo` needs the usual
`if __name__ == "__main__":` guard.
"""

from __future__ import annotations

import ctypes
import json
import logging
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from beacon.benchmarks.synth_demo import render_once
from beacon.demo.config import DemoConfig
from beacon.demo.stages import DemoStages, Stage
from beacon.jsonl import write_atomic

_PR_SET_PDEATHSIG = 1

Log = Callable[[str], None]


def quiet_libraries() -> None:
    """The demo loads and saves dozens of checkpoints: keep the libraries' per-load bars and
    checkpoint chatter out of its progress lines (warnings and errors still show)."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    logging.getLogger("accelerate").setLevel(logging.ERROR)


def run_stages(cfg: DemoConfig, log: Log, stages: list[Stage] | None = None) -> None:
    """Run every stage (or `stages`), logging `[i/N] name` and its wall time to `log`.

    The evaluation, GRPO and OPD stages load the same ~600 synthetic items (held-out, RL and OPD
    pools): one `render_once` block over all stages renders each once (~360 MB held), instead
    of ~7,000 renders at ~17 ms; the data stage keeps its training items in a block of its own.
    One `shared_pixels` block lets the three SFT runs of this process (the cold start, the
    teacher's, the student's) process each stored image once, not once per run.
    """
    from beacon.train.core.collate import shared_pixels

    with render_once(), shared_pixels():
        _Schedule(cfg, DemoStages(cfg).stages() if stages is None else stages, log).run()


class _Schedule:
    """The stages in order; a stretch of jobs' stages `jobs` jobs at once."""

    def __init__(self, cfg: DemoConfig, stages: list[Stage], log: Log) -> None:
        self.cfg, self.stages, self.log = cfg, stages, log
        path = self.timings_path = Path(cfg.out) / "timings.json"
        self.timings: dict[str, float] = json.loads(path.read_text()) if path.exists() else {}
        self.start = time.perf_counter()

    def run(self) -> None:
        i = 0
        while i < len(self.stages):
            end = i + 1
            if self.stages[i].job is not None:
                while end < len(self.stages) and self.stages[end].job is not None:
                    end += 1
            todo = self._skip_done(range(i, end))
            jobs = list(dict.fromkeys(self.stages[n].job for n in todo))
            if len(jobs) > 1 and self.cfg.jobs > 1:
                self._run_beside(todo, jobs)
            else:
                for n in todo:
                    began = time.perf_counter()
                    self.log(f"{self._tag(n)} {self.stages[n].name}")
                    self.stages[n].run()
                    self._record(n, time.perf_counter() - began)
            i = end

    def _skip_done(self, numbers: range) -> list[int]:
        """The stages of `numbers` left to run; finished ones keep the time they took then."""
        todo = []
        for n in numbers:
            if self.stages[n].done():
                self.log(f"{self._tag(n)} {self.stages[n].name}: already done")
            else:
                todo.append(n)
        return todo

    def _run_beside(self, todo: list[int], names: list[str | None]) -> None:
        """Each job's stages of `todo` in a pool process, `jobs` jobs at a time, in order."""
        jobs = min(self.cfg.jobs, len(names))
        threads = max(1, self.cfg.threads // jobs)
        settings = self.cfg.model_copy(update={"progress": False}).model_dump()
        queue = [(job, [n for n in todo if self.stages[n].job == job]) for job in names]
        pool = ProcessPoolExecutor(
            jobs,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_start_worker,
            initargs=(threads,),
        )
        going: dict[Future, list[int]] = {}
        try:
            while queue or going:
                while queue and len(going) < jobs:
                    job, numbers = queue.pop(0)
                    titles = " + ".join(self.stages[n].name for n in numbers)
                    self.log(f"{self._tag(numbers[0])} {titles} ({jobs} at once)")
                    going[pool.submit(run_job, settings, job)] = numbers
                finished, _ = wait(going, return_when=FIRST_COMPLETED)
                for future in finished:
                    try:
                        took = future.result()
                    except BrokenProcessPool as exc:
                        raise RuntimeError(
                            "a process running the demo's jobs died (out of memory? killed?); "
                            "rerun the demo to resume, with --set jobs=1 to run them in order"
                        ) from exc
                    for n in going.pop(future):
                        if self.stages[n].name in took:  # else finished meanwhile elsewhere
                            self._record(n, took[self.stages[n].name])
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _record(self, n: int, took: float) -> None:
        total = (time.perf_counter() - self.start) / 60
        name = self.stages[n].name
        self.log(f"{self._tag(n)} {name}: done in {took:.0f} s ({total:.1f} min so far)")
        self.timings[name] = round(took, 1)  # resumed: the run that ended it
        write_atomic(self.timings_path, json.dumps(self.timings, indent=2) + "\n")

    def _tag(self, n: int) -> str:
        return f"[{n + 1}/{len(self.stages)}]"


def _start_worker(threads: int) -> None:
    """A pool process: dies with the demo, `threads` torch threads, quiet libraries."""
    import torch

    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        parent = multiprocessing.parent_process()
        if parent is not None and os.getppid() != parent.pid:  # the demo died before that
            os._exit(1)
    torch.set_num_threads(threads)
    quiet_libraries()


def run_job(settings: dict, job: str) -> dict[str, float]:
    """In a pool process: the unfinished stages of `job`, in order; returns each one's wall
    time by name."""
    cfg = DemoConfig.model_validate(settings)
    took = {}
    with render_once():
        for stage in DemoStages(cfg).stages():
            if stage.job == job and not stage.done():
                began = time.perf_counter()
                stage.run()
                took[stage.name] = time.perf_counter() - began
    return took
