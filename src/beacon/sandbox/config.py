"""Sandbox settings and the result of one call."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

from PIL import Image
from pydantic import Field, model_validator

from beacon.config import StrictModel, raise_problems
from beacon.images import MAX_IMAGE_PIXELS
from beacon.sandbox.repair import RepairConfig
from beacon.types import ImageCrop

Isolation = Literal["auto", "bwrap", "unshare", "none"]


class SandboxError(RuntimeError):
    """The sandbox itself cannot work: no isolation available, workers fail to start."""


def _default_workers() -> int:
    return min(os.cpu_count() or 1, 8)


class SandboxConfig(StrictModel):
    """Limits and pool settings. Every limit applies per call unless its name says otherwise."""

    timeout_s: float = Field(
        10.0, description="wall-clock limit per call; the code's process group is SIGKILLed"
    )
    cpu_s: float | None = Field(
        None, description="CPU-time limit (RLIMIT_CPU); null means timeout_s + 1"
    )
    memory_mb: int = Field(
        2048, description="address space the code may add on top of the preloaded libraries"
    )
    max_file_mb: int = Field(64, description="largest file the code may write (RLIMIT_FSIZE)")
    max_processes: int = Field(
        64, description="threads the code's uid may have (RLIMIT_NPROC); forking is denied"
    )
    max_stdout_chars: int = Field(
        16_384, description="printed text kept per call; the rest becomes a marker line"
    )
    max_images: int = Field(
        8, description="images returned per call; later ones are dropped with a note"
    )
    max_image_pixels: int = Field(
        4096 * 4096, description="pixels per returned image; larger ones are refused"
    )
    max_input_pixels: int = Field(
        MAX_IMAGE_PIXELS, description="pixels per input image (decompression bombs)"
    )
    max_calls_per_session: int = Field(
        64, description="calls one session may run before it answers with an error"
    )
    max_code_chars: int = Field(
        100_000, description="longer code is refused before repair (repair is linear)"
    )
    session_disk_mb: int = Field(
        512, description="files a session may keep in its folder, in MB (as root: tmpfs)"
    )
    session_files: int = Field(
        20_000, description="files and folders a session may create (as root: tmpfs inodes)"
    )
    carry_variables: bool = Field(
        True, description="keep picklable variables between a session's calls (Thyme)"
    )
    max_state_mb: int = Field(
        64, description="carried variables larger than this (pickled) are all dropped"
    )
    num_workers: int = Field(
        default_factory=_default_workers, description="pre-forked worker processes"
    )
    isolation: Isolation = Field(
        "auto", description='"auto" tries bwrap, then unshare, and refuses otherwise'
    )
    require_seccomp: bool = Field(
        True,
        description="refuse to run code when a worker cannot load the seccomp deny-list "
        "(false: namespaces and rlimits only, with a warning)",
    )
    root_dir: str | None = Field(
        None, description="episode folders; null: a fresh one in /dev/shm (or $TMPDIR)"
    )
    child_uid_base: int = Field(
        200_000, description="as root, sessions run as uids above this (one per session)"
    )
    worker_max_rss_mb: int = Field(
        2048, description="a worker whose resident memory exceeds this is replaced"
    )
    startup_timeout_s: float = Field(
        60.0, description="time a worker may take to import its libraries"
    )
    worker_grace_s: float = Field(
        30.0, description="extra wait past timeout_s before a silent worker is replaced"
    )
    speed_tricks: bool = Field(
        True,
        description="the workers' speed tricks: glibc malloc settings (a heap on huge pages), "
        "a spare that rehearses a call and faults in heap while it waits, gc.freeze before "
        "forking, huge pages in the sessions' tmpfs; false: none of them, each call a few ms "
        "slower (docs/sandbox.md, 'Speed')",
    )
    repair: RepairConfig | None = Field(
        default_factory=RepairConfig,
        description="code repair (beacon.sandbox.repair.RepairConfig); null: run code as given",
    )

    def validate(self) -> list[str]:  # type: ignore[override]  # pydantic's BaseModel.validate is deprecated
        """Every invalid setting, one line each; [] if none.

        Raised at construction (a pydantic ValidationError, a ValueError), so
        `beacon.config.load_config` reports them together with the problems of the rest of a
        config.
        """
        problems = [
            f"{name}: must be > 0, got {getattr(self, name)!r}"
            for name in type(self).model_fields
            if name in _POSITIVE and getattr(self, name) <= 0
        ]
        if self.max_state_mb > self.max_file_mb:
            problems.append(
                f"max_state_mb: must be <= max_file_mb={self.max_file_mb}, got "
                f"{self.max_state_mb} (carried variables are saved as one file)"
            )
        if self.cpu_s is not None and self.cpu_s <= 0:
            problems.append(f"cpu_s: must be > 0 or None, got {self.cpu_s!r}")
        return problems

    @model_validator(mode="after")
    def _check(self) -> SandboxConfig:
        raise_problems(self.validate())
        return self

    @property
    def cpu_limit_s(self) -> float:
        return self.cpu_s if self.cpu_s is not None else self.timeout_s + 1.0


_POSITIVE = frozenset(
    {
        "timeout_s", "memory_mb", "max_file_mb", "max_processes", "max_stdout_chars",
        "max_images", "max_image_pixels", "max_input_pixels", "max_calls_per_session",
        "max_code_chars", "session_disk_mb", "session_files", "max_state_mb", "num_workers",
        "worker_max_rss_mb", "startup_timeout_s", "worker_grace_s",
    }
)  # fmt: skip


@dataclass
class ExecResult:
    """What one call produced, ready to show to the model.

    `error` is a short text (exception type, message and line, or why the call was stopped);
    `notes` are remarks for the model that are not failures, one short sentence each (images
    dropped over the cap, an unreadable printed image path skipped, a crop box clamped at run
    time, carried variables reset); `repairs` lists what code repair changed before running,
    and `code` is the code that actually ran (after repair). Every text is valid UTF-8.
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
    image_crops: list[ImageCrop | None] = field(default_factory=list)  # per image, if known
