"""Sandbox settings and the result of one call."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Literal, get_args

from PIL import Image

from beacon.images import MAX_IMAGE_PIXELS
from beacon.sandbox.repair import RepairConfig

Isolation = Literal["auto", "bwrap", "unshare", "none"]


class SandboxError(RuntimeError):
    """The sandbox itself cannot work: no isolation available, workers fail to start."""


def _default_workers() -> int:
    return min(os.cpu_count() or 1, 8)


@dataclass
class SandboxConfig:
    """Limits and pool settings. Every limit applies per call unless its name says otherwise."""

    timeout_s: float = 10.0  # wall-clock limit per call; the code's process group is SIGKILLed
    cpu_s: float | None = None  # CPU-time limit (RLIMIT_CPU); None means timeout_s + 1
    memory_mb: int = 2048  # address space the code may add on top of the preloaded libraries
    max_file_mb: int = 64  # largest file the code may write (RLIMIT_FSIZE)
    max_processes: int = 64  # threads the code's uid may have (RLIMIT_NPROC); forking is denied
    max_stdout_chars: int = 16_384  # printed text kept per call; the rest becomes a marker line
    max_images: int = 8  # images returned per call; later ones are dropped with a note
    max_image_pixels: int = 4096 * 4096  # pixels per returned image; larger ones are refused
    max_input_pixels: int = MAX_IMAGE_PIXELS  # pixels per input image (decompression bombs)
    max_calls_per_session: int = 64  # calls one session may run before it answers with an error
    carry_variables: bool = True  # keep picklable variables between a session's calls (Thyme)
    max_state_mb: int = 64  # carried variables larger than this (pickled) are all dropped
    num_workers: int = field(default_factory=_default_workers)  # pre-forked worker processes
    isolation: Isolation = "auto"  # "auto" tries bwrap, then unshare, and refuses otherwise
    root_dir: str | None = None  # episode folders; None: a fresh one in /dev/shm (or $TMPDIR)
    child_uid_base: int = 200_000  # as root, sessions run as uids above this (one per session)
    worker_max_rss_mb: int = 2048  # a worker whose resident memory exceeds this is replaced
    cached_sessions_per_worker: int = 8  # sessions whose decoded images a worker keeps
    startup_timeout_s: float = 60.0  # time a worker may take to import its libraries
    worker_grace_s: float = 30.0  # extra wait past timeout_s before a silent worker is replaced
    repair: RepairConfig | None = field(default_factory=RepairConfig)  # None: run code as given

    def validate(self) -> list[str]:
        """Every invalid setting, one line each (the `beacon.config` contract); [] if none.

        `Sandbox` raises a ValueError listing them; `beacon.config.load_config` reports them
        together with the problems of the rest of a config.
        """
        problems = [
            f"{f.name}: must be > 0, got {getattr(self, f.name)!r}"
            for f in fields(self)
            if f.name in _POSITIVE and getattr(self, f.name) <= 0
        ]
        if self.max_state_mb > self.max_file_mb:
            problems.append(
                f"max_state_mb: must be <= max_file_mb={self.max_file_mb}, got "
                f"{self.max_state_mb} (carried variables are saved as one file)"
            )
        if self.cpu_s is not None and self.cpu_s <= 0:
            problems.append(f"cpu_s: must be > 0 or None, got {self.cpu_s!r}")
        if self.isolation not in get_args(Isolation):
            allowed = ", ".join(repr(a) for a in get_args(Isolation))
            problems.append(f"isolation: must be one of {allowed}, got {self.isolation!r}")
        return problems

    @property
    def cpu_limit_s(self) -> float:
        return self.cpu_s if self.cpu_s is not None else self.timeout_s + 1.0


_POSITIVE = frozenset(
    {
        "timeout_s", "memory_mb", "max_file_mb", "max_processes", "max_stdout_chars",
        "max_images", "max_image_pixels", "max_input_pixels", "max_calls_per_session",
        "max_state_mb", "num_workers", "worker_max_rss_mb", "cached_sessions_per_worker",
        "startup_timeout_s", "worker_grace_s",
    }
)  # fmt: skip


@dataclass
class ExecResult:
    """What one call produced, ready to show to the model.

    `error` is a short text (exception type, message and line, or why the call was stopped);
    `notes` are remarks that are not failures (a refused image, carried variables lost);
    `repairs` lists what code repair changed before running.
    """

    ok: bool
    stdout: str = ""
    error: str | None = None
    images: list[Image.Image] = field(default_factory=list)
    timed_out: bool = False
    elapsed_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    repairs: list[str] = field(default_factory=list)
    code: str = ""
