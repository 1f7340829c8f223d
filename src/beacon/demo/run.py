"""`run_demo`: check the demo folder, run the stages, write the report.

The stages run through the one stage runner (`beacon.stages.run_stages`), in order, except that
the GRPO runs and OPD variants (each with its evaluation: a *job*) run `jobs` at a time. A GRPO
or OPD run of the demo model is mostly generation and sandbox calls, whose per-token and
per-call Python work keeps one core busy while the other idles (~27% of the machine idle during
GRPO on 2 cores). Two 8-step GRPO runs side by side, each in a process of its own with one torch
thread, took 33.9 s instead of 48.8 s one after the other. So a stretch of jobs goes to a pool
of `jobs` processes, each with `threads / jobs` torch threads; every other stage runs in this
process. Results do not depend on it beyond float rounding: a run's losses with one torch
thread or two agree to ~1e-7 (reductions split differently), and in 10-step runs the rewards
and evaluations came out identical. The pool starts processes by "spawn": a script that calls
`run_demo` needs the usual `if __name__ == "__main__":` guard.
"""

from __future__ import annotations

import ctypes
import gc
import json
import logging
import shutil
from collections.abc import Callable
from contextlib import ExitStack, suppress
from functools import partial
from pathlib import Path

from beacon.benchmarks.synth_demo import render_once
from beacon.demo.config import OPERATIONAL_KEYS, DemoConfig, cold_start_identity
from beacon.errors import UserError
from beacon.jsonl import write_atomic
from beacon.runfolder import check_run_folder
from beacon.stages import Pool, Stage, run_stages
from beacon.train.core.checkpoint import COMPLETE, TRAIN_STATE

CONFIG_FILE = "demo.yaml"
TIMINGS_FILE = "timings.json"
"""Each stage's wall time by name (a resumed stage: the run that finished it)."""


def run_demo(cfg: DemoConfig, log: Callable[[str], None]) -> Path:
    """Every stage (resuming finished work), then `report.md`; returns the report's path."""
    # lazy: torch, matplotlib and aiohttp stay out of `beacon --help`
    from beacon.demo.pipeline import DemoStages
    from beacon.demo.report import write_report

    cfg = _prepare(cfg)
    run_demo_stages(cfg, DemoStages(cfg).stages(), log)
    log("writing the report")
    return write_report(cfg)


def export_cold_start(cfg: DemoConfig, folder: Path, log: Callable[[str], None]) -> Path:
    """Run (or resume) the cold-start stages of `cfg` and copy the SFT checkpoint's model files
    into `folder` with the settings they were made with (`COLD_START_RECORD`): what
    `cold_start: shipped` starts from when `folder` is the package's assets."""
    # lazy: torch, matplotlib and aiohttp stay out of `beacon --help`
    from beacon.demo.pipeline import COLD_START_RECORD, DemoStages

    if cfg.cold_start != "train":
        raise UserError("--export-cold-start trains the cold start: leave cold_start=train")
    cfg = _prepare(cfg)
    stages = DemoStages(cfg)
    run_demo_stages(cfg, stages.cold_start_stages(), log)
    source = stages.sft_model()
    folder.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        if path.is_file() and path.name not in (COMPLETE, TRAIN_STATE):
            shutil.copy2(path, folder / path.name)
    record = {"settings": cold_start_identity(cfg), "made_by": "beacon demo --export-cold-start"}
    (folder / COLD_START_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    log(f"cold start exported to {folder}")
    return folder


def _prepare(cfg: DemoConfig) -> DemoConfig:
    """`cfg` with an absolute `out` (so `runs/demo` and `./runs/demo` are one folder to the
    stages' runs, whose identities hold model paths under it), the folder checked, torch's
    threads set."""
    import torch

    cfg = cfg.model_copy(update={"out": str(Path(cfg.out).resolve())})
    check_run_folder(
        Path(cfg.out), cfg, OPERATIONAL_KEYS, folder_setting="--out", config_file=CONFIG_FILE
    )
    quiet_libraries()
    torch.set_num_threads(cfg.threads)
    return cfg


def run_demo_stages(cfg: DemoConfig, stages: list[Stage], log: Callable[[str], None]) -> None:
    """Run `stages` (resuming finished work), logging progress lines to `log` and each stage's
    wall time to `timings.json`.

    The evaluation stages of this process load the same ~600 synthetic items (held-out, RL and
    OPD pools): one `render_once` block over all stages renders each once (~360 MB held),
    instead of once per evaluation; the data stage keeps its training items in a block of its
    own, and each pool process keeps one block for the jobs it runs (`start_worker`).
    """
    path = Path(cfg.out) / TIMINGS_FILE
    timings: dict[str, float] = json.loads(path.read_text()) if path.exists() else {}

    def record(stage: Stage, _result: object, seconds: float) -> None:
        timings[stage.name] = round(seconds, 1)
        write_atomic(path, json.dumps(timings, indent=2) + "\n")
        return_freed_memory()

    settings = cfg.model_copy(update={"progress": False}).model_dump()
    pool = Pool(cfg.jobs, partial(run_job, settings), partial(start_worker, cfg.threads))
    with render_once():
        run_stages(stages, log, on_done=record, pool=pool)


def return_freed_memory() -> None:
    """Hand the memory a finished stage freed back to the system. glibc's malloc keeps freed
    heap for reuse: after the data stage (its 4,200 rendered training items dropped) the demo's
    process still held 5.9 GB for the rest of the run. `malloc_trim(0)` returns it (600 items
    rendered and dropped: 398 MB held, 62 MB after the trim). A no-op off glibc."""
    gc.collect()
    with suppress(OSError, AttributeError):  # not glibc (macOS, musl): nothing to trim this way
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def quiet_libraries() -> None:
    """The demo loads and saves dozens of checkpoints: keep the libraries' per-load bars and
    checkpoint chatter out of its progress lines (warnings and errors still show)."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    logging.getLogger("accelerate").setLevel(logging.ERROR)


_WORKER_BLOCKS = ExitStack()
"""What a pool process keeps open for its whole life (see `start_worker`)."""


def start_worker(threads: int, workers: int) -> None:
    """A pool process: its share of the demo's torch threads, quiet libraries, and one
    `render_once` block for every job it runs. A stretch's jobs load the same held-out, RL and
    OPD items (~600, ~17 ms each to render): rendered once per process, not once per job."""
    import torch

    torch.set_num_threads(max(1, threads // workers))
    quiet_libraries()
    _WORKER_BLOCKS.enter_context(render_once())


def run_job(settings: dict, job: str) -> dict[str, float]:
    """In a pool process: the unfinished stages of `job`, in order; returns each one's wall
    time by name."""
    # lazy: torch, matplotlib and aiohttp stay out of `beacon --help`
    from beacon.demo.pipeline import DemoStages

    cfg = DemoConfig.model_validate(settings)
    took: dict[str, float] = {}

    def record(stage: Stage, _result: object, seconds: float) -> None:
        took[stage.name] = seconds

    stages = [stage for stage in DemoStages(cfg).stages() if stage.job == job]
    run_stages(stages, log=lambda _line: None, on_done=record)
    return_freed_memory()  # this process runs the stretch's next job
    return took
