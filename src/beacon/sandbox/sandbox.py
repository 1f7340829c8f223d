"""`Sandbox` (the worker pool) and `Session` (one episode's images, folder and variables).

Layout of the sandbox's root folder (bound read-write into the jail at the same path):

    <root>/                 0711 root      no listing: sessions cannot find each other
      _code/                0755 root      worker.py, episode.py, wire.py, repair.py, mpl cache
      <session>/            0711 root
        images/             0755 root      read-only copies of the input images (`image_path`)
        temp_processed_images/  0700 session   the code's working and output folder
        state/              0700 session   carried variables (pickled and unpickled by the child)

Under bwrap, `/mnt/data` in the jail is a symlink to `/proc/self/cwd/..`: every child sees its
own session folder there, so model code sees the same paths in every episode
(`/mnt/data/images/image_0.png`, Thyme's `/mnt/data/temp_processed_images/`) and prompts do
not change from one rollout to the next. Other layers show the host paths.

When the sandbox runs as root every session gets its own uid, so one session's code cannot read
or change another's files. Nothing the child writes is read by the trusted process except the
validated result frame.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import logging
import os
import secrets
import shutil
import tempfile
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from PIL import Image

from beacon.images import ImageError
from beacon.sandbox import results
from beacon.sandbox.config import ExecResult, SandboxConfig, SandboxError
from beacon.sandbox.jail import python_dirs, readable_by_others, resolve_isolation
from beacon.sandbox.pool import Worker, WorkerDied, WorkerSlot
from beacon.sandbox.repair import repair_code
from beacon.types import ImageSource

logger = logging.getLogger(__name__)

_CODE_FILES = ("worker.py", "episode.py", "wire.py", "repair.py")  # stdlib/numpy/PIL only
_JAIL_VIEW = "/mnt/data"  # see the module docstring
_INPUTS = "images"
_OUTPUT = "temp_processed_images"
_MAX_CODE_CHARS = 1_000_000  # far above any model's code; keeps requests under the wire limit


class Sandbox:
    """A pool of jailed, pre-forked workers that run untrusted code for many sessions at once.

    Thread-safe. Use as a context manager, or call `close()`.
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        problems = self.config.validate()
        if problems:
            raise ValueError(
                f"invalid SandboxConfig ({len(problems)} problem{'s' * (len(problems) != 1)}); "
                "fix these settings:\n  " + "\n  ".join(problems)
            )
        self.isolation = resolve_isolation(self.config.isolation)
        self.drop_uid = os.geteuid() == 0 and self._uids_can_run_python()
        # a random block of 65536 uids, so two sandboxes on one machine do not share uids
        self._uid_block = self.config.child_uid_base + secrets.randbelow(1 << 14) * (1 << 16)
        self._owns_root = self.config.root_dir is None
        self.root = self._make_root()
        if self._owns_root:  # also when close() is never called
            weakref.finalize(self, shutil.rmtree, self.root, True)
        self._lock = threading.Lock()
        self._session_ids = itertools.count()
        self._closed = False
        self._slots = [WorkerSlot(i, self._start_worker) for i in range(self.config.num_workers)]
        try:
            with ThreadPoolExecutor(len(self._slots)) as pool:
                list(pool.map(WorkerSlot.ensure, self._slots))
        except BaseException:
            self.close()
            raise
        logger.info(
            "sandbox ready: %d workers, isolation=%s, root=%s",
            len(self._slots),
            self.isolation,
            self.root,
        )

    def _uids_can_run_python(self) -> bool:
        """Whether children can drop to their own uid and still import Python modules.

        bwrap re-creates the folders above the installation world-readable; other layers use
        the host's, and a Python under a 0700 home (pyenv in /root) is then unreadable.
        """
        if self.isolation == "bwrap" or readable_by_others(python_dirs()):
            return True
        problem = (
            f"the Python installation ({', '.join(python_dirs())}) is not readable by other "
            "users, so sandboxed code could not drop root"
        )
        if self.isolation != "none":
            raise SandboxError(
                f"isolation={self.isolation!r} cannot run here: {problem}. Install bubblewrap "
                "(bwrap re-creates those folders readable), or install Python in a "
                "world-readable place, or set SandboxConfig(isolation='none') to run code as "
                "root with only seccomp and rlimits (unsafe)."
            )
        logger.warning("sandbox children run as root: %s", problem)
        return False

    def _make_root(self) -> str:
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # memory-backed: fast
        root = self.config.root_dir or tempfile.mkdtemp(prefix="beacon-sandbox-", dir=shm)
        code = Path(root) / "_code"
        (code / "mpl").mkdir(parents=True, exist_ok=True)
        here = Path(__file__).parent
        for name in _CODE_FILES:
            shutil.copyfile(here / name, code / name)
        os.chmod(root, 0o711)
        return str(Path(root).resolve())

    def _start_worker(self) -> Worker:
        return Worker(self.isolation, self.root, self.config.startup_timeout_s)

    def session(self, images: list[ImageSource] | None = None) -> Session:
        """Open one episode with its input images (PIL images, paths or encoded bytes)."""
        with self._lock:
            if self._closed:
                raise SandboxError("this Sandbox is closed; create a new one")
            number = next(self._session_ids)
            slot = min(self._slots, key=lambda s: s.sessions)
            slot.sessions += 1
        try:
            return Session(self, slot, number, list(images or []))
        except BaseException:
            with self._lock:
                slot.sessions -= 1
            raise

    def worker_pids(self) -> list[int]:
        """Host pids of the worker processes; -1 for a slot whose worker is being replaced."""
        return [slot.pid for slot in self._slots]

    def _release(self, slot: WorkerSlot, session_key: str) -> None:
        with self._lock:
            slot.sessions -= 1
            slot.pending_drops.append(session_key)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for slot in self._slots:
            with slot.lock:
                if slot.worker is not None:
                    slot.worker.close()
                    slot.worker = None
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Session:
    """One episode: its images, its folder, its carried variables. Calls run one at a time."""

    def __init__(
        self, sandbox: Sandbox, slot: WorkerSlot, number: int, images: list[ImageSource]
    ) -> None:
        self._sandbox, self._slot = sandbox, slot
        self._config = sandbox.config
        self._lock = threading.Lock()
        self.calls = 0
        self.closed = False
        self.key = f"{number:06d}-{secrets.token_hex(4)}"
        self.uid = sandbox._uid_block + number % (1 << 16) if sandbox.drop_uid else None
        self.dir = os.path.join(sandbox.root, self.key)  # on the host
        self.host_output_dir = os.path.join(self.dir, _OUTPUT)
        self.state_path = os.path.join(self.dir, "state", "vars.pkl")
        view = _JAIL_VIEW if sandbox.isolation == "bwrap" else self.dir
        self.output_dir = os.path.join(view, _OUTPUT)  # as model code sees it
        self._make_folders()
        try:
            self.host_image_paths, self.image_sizes = self._store_inputs(images)
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        self.image_paths = [  # as model code sees them; shown to the model in the prompt
            os.path.join(view, _INPUTS, os.path.basename(p)) for p in self.host_image_paths
        ]

    def _make_folders(self) -> None:
        os.mkdir(self.dir, 0o711)
        os.mkdir(os.path.join(self.dir, _INPUTS), 0o755)
        for sub in (_OUTPUT, "state"):
            path = os.path.join(self.dir, sub)
            os.mkdir(path, 0o700)
            if self.uid is not None:
                os.chown(path, self.uid, self.uid)

    def _store_inputs(self, images: list[ImageSource]) -> tuple[list[str], list[tuple[int, int]]]:
        """Write a readable copy of each input image; decoding happens once, in the worker."""
        paths, sizes = [], []
        for i, source in enumerate(images):
            data, ext, size = _encoded_copy(source, self._config.max_input_pixels)
            path = os.path.join(self.dir, _INPUTS, f"image_{i}{ext}")
            with open(path, "wb") as f:
                f.write(data)
            os.chmod(path, 0o644)
            paths.append(path)
            sizes.append(size)
        return paths, sizes

    def run(self, code: str) -> ExecResult:
        """Run `code` in the episode; never raises for anything the code does."""
        with self._lock:
            if self.closed:
                raise SandboxError("this session is closed; open a new one with Sandbox.session()")
            start = time.monotonic()
            if len(code) > _MAX_CODE_CHARS:
                return ExecResult(
                    ok=False,
                    error=f"the code is {len(code)} characters long, over the sandbox's limit "
                    f"of {_MAX_CODE_CHARS}",
                )
            if self.calls >= self._config.max_calls_per_session:
                return ExecResult(
                    ok=False,
                    error=f"call limit reached: this session already ran {self.calls} calls "
                    f"(SandboxConfig.max_calls_per_session={self._config.max_calls_per_session})",
                )
            self.calls += 1
            code, repairs = self._repair(code)
            result = self._dispatch(self._request(code))
            result.repairs = repairs
            result.elapsed_s = time.monotonic() - start
            return result

    async def arun(self, code: str) -> ExecResult:
        """`run` for asyncio callers; the blocking wait happens in a thread."""
        return await asyncio.to_thread(self.run, code)

    def _repair(self, code: str) -> tuple[str, list[str]]:
        """Thyme-style code repair (see `beacon.sandbox.repair`); needs an input image."""
        if self._config.repair is None or not self.image_paths:
            return code, []
        try:
            result = repair_code(
                code,
                image_size=self.image_sizes[0],
                image_path=self.image_paths[0],
                output_dir=self.output_dir,
                config=self._config.repair,
                other_image_paths=self.image_paths[1:],
            )
        except Exception as exc:  # a repair bug must not cost the episode: run the code as given
            logger.exception("code repair failed; running the code unrepaired")
            return code, [f"code repair failed ({type(exc).__name__}); ran the code as given"]
        return result.code, result.changes

    def _request(self, code: str) -> dict[str, Any]:
        cfg = self._config
        return {
            "op": "run",
            "session": self.key,
            "code": code,
            "inputs": self.host_image_paths,
            "image_paths": self.image_paths,
            "out_dir": self.host_output_dir,
            "output_dir": self.output_dir,
            "state_path": self.state_path,
            "call": self.calls,
            "uid": self.uid,
            "carry": cfg.carry_variables,
            "timeout_s": cfg.timeout_s,
            "cpu_s": cfg.cpu_limit_s,
            "memory_bytes": cfg.memory_mb << 20,
            "max_file_bytes": cfg.max_file_mb << 20,
            "max_processes": cfg.max_processes,
            "max_stdout_chars": cfg.max_stdout_chars,
            "max_images": cfg.max_images,
            "max_image_pixels": cfg.max_image_pixels,
            "max_input_pixels": cfg.max_input_pixels,
            "max_state_bytes": cfg.max_state_mb << 20,
            "max_result_bytes": results.max_result_bytes(cfg),
            "cached_sessions": cfg.cached_sessions_per_worker,
        }

    def _dispatch(self, request: dict[str, Any]) -> ExecResult:
        """Send to the pinned worker; resend once if it was already dead; replace it if needed."""
        cfg = self._config
        slot = self._slot
        with slot.lock:
            for attempt in (1, 2):
                worker = slot.ensure()
                request["drop"], slot.pending_drops = slot.pending_drops, []
                try:
                    worker.send(request, time.monotonic() + cfg.startup_timeout_s)
                except WorkerDied as exc:
                    slot.replace()
                    if attempt == 2:
                        return ExecResult(ok=False, error=f"sandbox worker unavailable: {exc}")
                    continue
                break
            deadline = time.monotonic() + cfg.timeout_s + cfg.worker_grace_s
            try:
                frame = worker.receive(deadline, results.worker_limits(cfg))
            except WorkerDied as exc:
                logger.warning("sandbox worker %d failed during a call: %s", slot.index, exc)
                slot.replace()
                return ExecResult(
                    ok=False,
                    error="the sandbox worker died while running this code and was restarted",
                )
            if worker.rss_kb > cfg.worker_max_rss_mb * 1024:
                logger.info("sandbox worker %d grew to %d MB; replacing it", slot.index,
                            worker.rss_kb // 1024)  # fmt: skip
                slot.replace()
        return results.decode_result(frame, cfg)

    def close(self) -> None:
        """Forget the episode: its folder is deleted and its worker drops its cached images."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        self._sandbox._release(self._slot, self.key)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _encoded_copy(source: ImageSource, max_pixels: int) -> tuple[bytes, str, tuple[int, int]]:
    """Encoded bytes, file extension and size of an input image, checked for decompression bombs.

    Paths and bytes are copied as they are (only the header is read). PIL images are written as
    uncompressed BMP: 25 ms for 4000x3000 where PNG even at level 1 takes a second, and the
    worker decodes it in 12 ms.
    """
    if isinstance(source, Image.Image):
        _check_pixels(source.size, max_pixels)
        buf = io.BytesIO()
        (source if source.mode == "RGB" else source.convert("RGB")).save(buf, format="BMP")
        return buf.getvalue(), ".bmp", source.size
    data = source if isinstance(source, bytes) else _read_file(source)
    try:
        with Image.open(io.BytesIO(data)) as img:
            size, fmt = img.size, (img.format or "png").lower()
    except Exception as exc:  # PIL raises many types for corrupt data
        raise ImageError(f"cannot decode input image: {type(exc).__name__}: {exc}") from exc
    _check_pixels(size, max_pixels)
    return data, "." + {"jpeg": "jpg"}.get(fmt, fmt), size


def _read_file(path: str | Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ImageError(f"cannot read input image {str(path)!r}: {exc.strerror}") from exc


def _check_pixels(size: tuple[int, int], max_pixels: int) -> None:
    if size[0] * size[1] > max_pixels:
        raise ImageError(
            f"input image of {size[0]}x{size[1]} pixels is over the limit of {max_pixels} "
            "(a possible decompression bomb); raise SandboxConfig.max_input_pixels to allow it"
        )
