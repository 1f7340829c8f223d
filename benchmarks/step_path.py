"""How many rooms does one training step walk through? (issue 50, item 1)

Runs one GRPO step and one OPD step of the tiny configs in-process, from the command function
a user's `beacon train grpo|opd` calls (`beacon.train.cli.grpo_command` / `opd_command`) until
the first optimizer step returns (`optimizer_step` in `beacon.train.core`), under
`sys.setprofile` (and `threading.setprofile` for the threads the run starts: the agent loop's,
the critic's). Counted:

- files: every file under `src/beacon` whose functions run on that path;
- packages: the folders under `beacon` those files sit in (`train/grpo`, `train/core`, `agent`;
  `.` for the ground floor);
- package switches: the distinct call edges (caller file -> callee file) whose two files sit in
  different packages; a call through library code (torch, asyncio) links the nearest `beacon`
  frames on either side.

Left out: `beacon/sandbox/` and `beacon/engines/` (the internals an episode calls) and
`beacon/fakes/` (test stand-ins a real run lacks), and every call made from inside them (the path
does not descend into them); module-level code run by an import and the import system's hooks
(imports are not the step). The models are built, and the tiny configs set to one step, before
counting starts. OPD's teacher check runs, as it does by default before step 1 (set to warn: a
random tiny teacher is no better than its student). GRPO's tiny model samples through
`beacon.fakes.logits.synth_choices` (as tests/train/test_grpo.py does), so groups keep responses
and the update is a real one.

The reader's view (`StepPath.reader_view`) counts the same run without the episode, the ground
floor and the in-process servers: the rooms a reader of the trainer walks through. The step alone
(`StepPath.step_view`) counts from the first call of the loop's `run_step` (in any thread): one
step without the run's setup (config, memory plan, model building, the first weight push).

    python benchmarks/step_path.py            # both steps, both views; about 15 s on 2 CPU cores
    python benchmarks/step_path.py --list     # and every file and switch
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import beacon

SRC = Path(beacon.__file__).resolve().parent
ROOT = str(SRC) + "/"
EXCLUDED = ("sandbox/", "engines/", "fakes/")
"""Folders under `beacon` whose internals are not the step's (and not descended into); `fakes/`
holds the test stand-ins a real run does not have (here the tiny model's scripted choices)."""
START = "run_step"
"""The loop's function for one whole step: the step view counts from its first call."""
STOP = "optimizer_step"
"""The loop's function around `optimizer.step()`: counting ends when the first one returns."""
BEFORE = {"grpo": (56, 50), "opd": (67, 70)}
"""(files, package switches) of main at 4827083, before the re-foldering (this script; OPD was
counted with its teacher check off then)."""
BEFORE_READER = {"grpo": (35, 21), "opd": (43, 34)}
"""The reader's view of main at 4827083 (`reader_view`; its servers were `revue/scripted.py` and
`train/opd/teacher.py` then)."""
CEILING = {"grpo": (38, 42), "opd": (43, 50)}
CEILING_READER = {"grpo": (18, 17), "opd": (20, 17)}
CEILING_STEP = {"grpo": (27, 28), "opd": (30, 30)}
CEILING_STEP_READER = {"grpo": (13, 14), "opd": (14, 11)}
"""(files, package switches) after the re-foldering and the merges (`beacon.rollout` one module;
`train/core/memory.py`; the rollout engine in `train/core/setup.py`; OPD's `critic_schema.py`,
`revue_loss.py`, the conditioning in `score.py`), in the four views (whole path, reader's view,
the step alone, the step alone in the reader's view): tests/test_step_path.py keeps a step from
walking through more rooms than this."""
READER_LEFT_OUT = ("agent", "verify", "benchmarks", ".")
"""The reader's view leaves out, besides the folders above, the episode an agent loop runs
(`agent/`, the verifiers, the benchmark's scoring) and the ground floor (`types`, `config`,
`jsonl`, `images`, `files`, `progress`, `blocks`, `runfolder`: library calls a reader of the
step meets as names, not rooms to walk)."""
SERVERS = ("train/opd/scripted_critic.py", "train/opd/teacher_server.py")
"""In-process servers a tiny run starts: the other end of an HTTP call, a separate process in a
real run (the reader's view leaves them out)."""
TARGET = (20, 30)
"""Issue 50's bound for each step: at most 20 files and 30 package switches. The reader's view
meets it for both steps, the run's setup included (GRPO 18 files / 17 switches, OPD 20 / 17 with
its teacher check); it is the view that reproduces the issue's own counts on the code it was
written against (35 / 43 files here at 4827083, the issue's 38 / 42). Counted with every file
whose code runs (the ground floor, the agent loop and the verifiers included) no step meets it
(38 and 43 files)."""


def importing(frame: FrameType) -> bool:
    """Import work, not the step's: a module's top-level code, or a hook the import system
    calls (the finder of `beacon.moved`)."""
    caller = frame.f_back
    by_import = caller is not None and caller.f_code.co_filename.startswith("<frozen importlib")
    return frame.f_code.co_name == "<module>" or by_import


def package(path: str) -> str:
    """`train/grpo` for `.../beacon/train/grpo/policy.py`; `.` for the ground floor."""
    return str(Path(path).relative_to(SRC).parent)


@dataclass
class StepPath:
    """The files and cross-file call edges seen between the entry and the first optimizer step."""

    files: set[str] = field(default_factory=set)
    edges: set[tuple[str, str]] = field(default_factory=set)
    recording: bool = True
    counted: dict[int, bool] = field(default_factory=dict)
    """Live `beacon` frames (by id): whether each is on the counted path."""
    stepping: bool = False
    step_files: set[str] = field(default_factory=set)
    step_edges: set[tuple[str, str]] = field(default_factory=set)
    """What ran from the first `run_step` call on (any thread): the step without its setup."""

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.recording or event not in ("call", "return"):
            return
        name = frame.f_code.co_filename
        if not name.startswith(ROOT):
            return
        if event == "return":
            if self.counted.pop(id(frame), False) and frame.f_code.co_name == STOP:
                self.recording = False
            return
        caller = frame.f_back
        while caller is not None and not caller.f_code.co_filename.startswith(ROOT):
            caller = caller.f_back
        inside = caller is not None and not self.counted.get(id(caller), True)
        rel = name[len(ROOT) :]
        skip = inside or rel.startswith(EXCLUDED) or importing(frame)
        self.counted[id(frame)] = not skip
        if skip:
            return
        self.stepping = self.stepping or frame.f_code.co_name == START
        edge = None
        if caller is not None and caller.f_code.co_filename != name:
            edge = (caller.f_code.co_filename, name)
        self.files.add(name)
        self.edges.update([edge] if edge else [])
        if self.stepping:
            self.step_files.add(name)
            self.step_edges.update([edge] if edge else [])

    def reader_view(self) -> StepPath:
        """The same path without the episode, the ground floor and the in-process servers."""

        def kept(name: str) -> bool:
            rel = name[len(ROOT) :]
            return package(name) not in READER_LEFT_OUT and rel not in SERVERS

        view = StepPath(recording=False)
        view.files = {f for f in self.files if kept(f)}
        view.edges = {(a, b) for a, b in self.edges if kept(a) and kept(b)}
        return view

    def step_view(self) -> StepPath:
        """The path from the first `run_step` call on: one step without the run's setup (config,
        memory plan, model and engine building, the first weight push), in every thread."""
        view = StepPath(recording=False)
        view.files, view.edges = set(self.step_files), set(self.step_edges)
        return view

    def switches(self) -> set[tuple[str, str]]:
        return {(a, b) for a, b in self.edges if package(a) != package(b)}

    def packages(self) -> set[str]:
        return {package(f) for f in self.files}


def trace(run: Callable[[], Any]) -> StepPath:
    """`run()` under the profile hook (this thread and the threads it starts)."""
    path = StepPath()
    threading.setprofile(path.hook)
    sys.setprofile(path.hook)
    try:
        run()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return path


def grpo_step(tmp: Path) -> StepPath:
    """`beacon train grpo --config grpo_tiny`, one step, the tiny model steered to synth answers."""
    import beacon.train.grpo as grpo
    from beacon.engines.tiny import cached_tiny_model
    from beacon.fakes.logits import synth_choices
    from beacon.train.cli import grpo_command

    def choices(tokenizer: Any) -> list[Any]:
        return [synth_choices(tokenizer, ("49E", "93V"))]

    tiny = cached_tiny_model("qwen2_vl")
    sets = [f"model.path={tiny}", f"train.output_dir={tmp / 'grpo'}", "train.max_steps=1"]
    original = grpo.run_grpo
    grpo.run_grpo = functools.partial(original, logits_processors=choices)  # type: ignore[assignment]
    try:
        return trace(command(grpo_command, "grpo_tiny", sets))
    finally:
        grpo.run_grpo = original  # type: ignore[assignment]


def opd_step(tmp: Path) -> StepPath:
    """`beacon train opd --config opd_tiny`, one step after the teacher check (tiny models,
    scripted critic)."""
    from beacon.engines.tiny import make_tiny_model
    from beacon.train.cli import opd_command

    student = make_tiny_model(tmp / "student", seed=0)
    teacher = make_tiny_model(tmp / "teacher", seed=1)
    sets = [
        f"model.path={student}",
        f"teacher.path={teacher}",
        f"train.output_dir={tmp / 'opd'}",
        "train.max_steps=1",
        "teacher_check.on_fail=warn",
        "teacher_check.on_context_hurts=warn",
    ]
    return trace(command(opd_command, "opd_tiny", sets))


def command(fn: Callable[..., None], config: str, sets: list[str]) -> Callable[[], None]:
    """A call of a `beacon train` command function with its options' defaults; the shipped
    config's name is resolved here, as typer's option callback does before the command runs."""
    from beacon.configs import resolve_config

    return functools.partial(
        fn,
        config=resolve_config(config),
        sets=sets,
        resume=False,
        no_progress=True,
        show=False,
        dry_run=False,
        device_memory_gb=None,
        processes=None,
        sharding=None,
    )


def report(name: str, path: StepPath, listing: bool, before: tuple[int, int] | None) -> None:
    """The counts beside main before the re-foldering (`-`: that view was not counted then)."""
    files, switches = len(path.files), len(path.switches())
    was = [str(n) for n in before] if before else ["-", "-"]
    print(f"\n{name}: {files} files in {len(path.packages())} packages, {switches} switches")
    print(f"  packages: {', '.join(sorted(path.packages()))}")
    print(f"  {'':10} {'before':>7} {'now':>5} {'target':>7}")
    print(f"  {'files':10} {was[0]:>7} {files:>5} {TARGET[0]:>7}")
    print(f"  {'switches':10} {was[1]:>7} {switches:>5} {TARGET[1]:>7}")
    if listing:
        for f in sorted(path.files):
            print(f"    {Path(f).relative_to(SRC)}")
        for a, b in sorted(path.switches()):
            print(f"    {Path(a).relative_to(SRC)} -> {Path(b).relative_to(SRC)}")


def measure() -> dict[str, StepPath]:
    """Both steps' paths, in a temporary folder."""
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        return {"grpo": grpo_step(Path(tmp)), "opd": opd_step(Path(tmp))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print every file and switch")
    args = parser.parse_args()
    for name, path in measure().items():
        report(name, path, args.list, BEFORE[name])
        report(f"{name} (reader's view)", path.reader_view(), args.list, BEFORE_READER[name])
        step = path.step_view()
        report(f"{name} (the step alone)", step, args.list, None)
        report(f"{name} (the step alone, reader's view)", step.reader_view(), args.list, None)


if __name__ == "__main__":
    main()
