"""`Sandbox` (the worker pool) and `Session` (one episode's images, folder and variables).

Layout of the sandbox's root folder (bound read-write into the jail at the same path):

    <root>/                 0711 root      no listing: sessions cannot find each other
      _code/                0755 root      worker.py, child.py, outputs.py, crops.py, wire.py:
                                           no beacon imports
      _owner                0600 root      the owning process, for removing stale roots
      <session>/            0710 root:session   only the session's own uid can enter
        images/             0755 root      read-only copies of the input images (`image_path`)
        pixels/             0755 root      the inputs' raw RGBX pixels, mapped by each call
        temp_processed_images/  0700 session   the code's working and output folder
        state/              0700 session   carried variables (pickled and unpickled by the child)

As root, `<root>` and every `<session>` are tmpfs mounts (see `beacon.sandbox.folders`): each
session has its own size and inode quota, and closing it is an unmount, done off the caller's
thread. Every session has its own uid, never reused while its folder exists.

Under bwrap, `/mnt/data` in the jail is a symlink to `/proc/self/cwd/..`: every child sees its
own session folder there, so model code sees the same paths in every episode
(`/mnt/data/images/image_0.png`, Thyme's `/mnt/data/temp_processed_images/`) and prompts do
not change from one rollout to the next. Other layers show the host paths.

Nothing the child writes is read by the trusted process except the validated result frame.
"""

from __future__ import annotations

import asyncio
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

from beacon.sandbox import folders, results
from beacon.sandbox.config import ExecResult, SandboxConfig, SandboxError
from beacon.sandbox.inputs import InputHeader, SessionInput, describe_input
from beacon.sandbox.jail import python_dirs, readable_by_others, resolve_isolation
from beacon.sandbox.pool import Worker, WorkerDied, WorkerSlot
from beacon.sandbox.repair import repair_code
from beacon.sandbox.wire import RunRequest
from beacon.types import ImageSource

logger = logging.getLogger(__name__)

_CODE_FILES = ("worker.py", "child.py", "outputs.py", "crops.py", "wire.py")
_JAIL_VIEW = "/mnt/data"  # see the module docstring
_INPUTS = "images"
_PIXELS = "pixels"
_OUTPUT = "temp_processed_images"
_OWN_FILES = 64  # inodes of the sandbox's own files in a session folder, beyond the quota
_HUGE_PAGES = "huge=within_size"
"""A session's tmpfs keeps files of 2 MB and more on huge pages: a call's code then reads its
mapped input pixels with one page fault per 2 MB instead of one per 64 KB (1.4 ms of the
benchmark's heavy call: `benchmarks/sandbox_latency.py --tricks`). Off with
`SandboxConfig.speed_tricks`."""
_END_SESSION_S = 2.0  # a worker answers "end" in about 0.2 ms, between or during calls


def input_name(index: int, ext: str) -> str:
    """File name of input image `index`: model code finds it as `/mnt/data/images/<name>`
    under bwrap, the path its prompt names (`jailed_input_path`)."""
    return f"image_{index}{ext}"


def jailed_input_path(index: int, ext: str) -> str:
    """The path a bwrap-isolated session shows its model for input image `index`; fixed, so a
    prompt's path line is the same text in every episode (a tokenizer can hold it as one token,
    as the demo's does)."""
    return os.path.join(_JAIL_VIEW, _INPUTS, input_name(index, ext))


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
        uid_block = self.config.child_uid_base + secrets.randbelow(1 << 14) * (1 << 16)
        self._uids = folders.UidPool(uid_block, 1 << 16) if self.drop_uid else None
        self._cleaner = folders.Cleaner()
        self._owns_root = self.config.root_dir is None
        self.quotas = False  # set by _make_root: sessions are tmpfs mounts with a quota
        self.root = self._make_root()
        if self._owns_root:  # also when close() is never called
            weakref.finalize(self, folders.remove_tree, self.root)
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
            "sandbox ready: %d workers, isolation=%s, root=%s, session quotas %s",
            len(self._slots),
            self.isolation,
            self.root,
            "on" if self.quotas else "off (not root)",
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
        if self._owns_root:
            parent = shm or tempfile.gettempdir()
            for stale in folders.stale_roots(parent):
                logger.info("removing %s, left behind by a sandbox that was killed", stale)
                self._cleaner.submit(lambda path=stale: folders.remove_tree(path))
        root = self.config.root_dir or tempfile.mkdtemp(prefix=folders.ROOT_PREFIX, dir=shm)
        if self._owns_root:
            self.quotas = folders.make_shared_root(root)
            folders.write_owner(root)
        code = Path(root) / "_code"
        (code / "mpl").mkdir(parents=True, exist_ok=True)
        here = Path(__file__).parent
        for name in _CODE_FILES:
            shutil.copyfile(here / name, code / name)
        os.chmod(root, 0o711)
        return str(Path(root).resolve())

    def _start_worker(self) -> Worker:
        cfg = self.config
        return Worker(
            self.isolation, self.root, cfg.startup_timeout_s, cfg.require_seccomp, cfg.speed_tricks
        )

    def session(
        self, images: list[ImageSource] | None = None, *, deferred: bool = False
    ) -> Session:
        """Open one episode with its input images (PIL images, paths or encoded bytes).

        `deferred=True` returns at once with the session's image paths known (what a prompt
        needs) and leaves its folder and input files to `session.open()`, which the caller can
        run in a thread while the model writes its first turn; the first call opens it if
        nothing did. An input that cannot be stored then fails `open()` and every call, not
        this method: an episode that never runs code does not need its inputs stored.
        """
        images = list(images or [])
        max_pixels = self.config.max_input_pixels
        if deferred:
            inputs = [describe_input(source, max_pixels) for source in images]
        else:
            inputs = [SessionInput.of(source, max_pixels) for source in images]
        with self._lock:
            if self._closed:
                raise SandboxError("this Sandbox is closed; create a new one")
            number = next(self._session_ids)
            slot = min(self._slots, key=lambda s: s.sessions)
            slot.sessions += 1
        uid = None
        try:
            uid = self._uids.allocate() if self._uids is not None else None
            session = Session(self, slot, number, uid, inputs, images if deferred else None)
        except BaseException:
            with self._lock:
                slot.sessions -= 1
            if uid is not None:
                self._uids.release(uid)
            raise
        if not deferred:
            try:
                session.open(inputs)
            except BaseException:
                session.close()
                raise
        return session

    def worker_pids(self) -> list[int]:
        """Host pids of the worker processes; -1 for a slot whose worker is being replaced."""
        return [slot.pid for slot in self._slots]

    def _release(self, session: Session) -> None:
        """Forget a closed session: its folder goes (off this thread), then its uid."""
        with self._lock:
            session._slot.sessions -= 1

        def remove() -> None:
            folders.remove_tree(session.dir)
            if session.uid is not None:
                self._uids.release(session.uid)

        self._cleaner.submit(remove)

    def wait_for_cleanup(self) -> None:
        """Block until the folders of the sessions closed so far are removed."""
        self._cleaner.wait()

    def close(self) -> None:
        """Stop the workers and remove the sandbox's folders; later calls are refused."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for slot in self._slots:
            with slot.lock:
                if slot.worker is not None:
                    slot.worker.close()
                    slot.worker = None
        self._cleaner.close()
        if self._owns_root:
            folders.remove_tree(self.root)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Session:
    """One episode: its images, its folder, its carried variables. Calls run one at a time."""

    def __init__(
        self,
        sandbox: Sandbox,
        slot: WorkerSlot,
        number: int,
        uid: int | None,
        inputs: list[InputHeader],
        sources: list[ImageSource] | None = None,
    ) -> None:
        self._sandbox, self._slot = sandbox, slot
        self._config = sandbox.config
        self._lock = threading.Lock()
        self._open_lock = threading.Lock()  # held while the folder and inputs are made
        self._sources = sources  # a deferred session's images, until `open` stores them
        self._opened = False
        self._open_error: BaseException | None = None
        self.calls = 0
        self._workers: list[Worker] = []  # every worker a call of this session was sent to
        self.closed = False
        self.key = f"{number:06d}-{secrets.token_hex(4)}"
        self.uid = uid
        self.dir = os.path.join(sandbox.root, self.key)  # on the host
        self.host_output_dir = os.path.join(self.dir, _OUTPUT)
        self.state_path = os.path.join(self.dir, "state", "vars.pkl")
        jailed = sandbox.isolation == "bwrap"
        # Where model code sees its outputs and inputs; the input paths are shown in the prompt.
        self.output_dir = os.path.join(_JAIL_VIEW if jailed else self.dir, _OUTPUT)
        self.pixel_files = [
            os.path.join(self.dir, _PIXELS, input_name(i, ".rgbx")) for i in range(len(inputs))
        ]
        self.host_image_paths = [
            os.path.join(self.dir, _INPUTS, input_name(i, image.ext))
            for i, image in enumerate(inputs)
        ]
        self.image_sizes = [i.size for i in inputs]
        self.image_paths = (
            [jailed_input_path(i, image.ext) for i, image in enumerate(inputs)]
            if jailed
            else list(self.host_image_paths)
        )

    def open(self, inputs: list[SessionInput] | None = None) -> None:
        """Make the session's folder and store its inputs: at most once, never after `close()`.

        A failure raises what storing the inputs raised, and SandboxError at every later
        `open()` or call.
        """
        with self._open_lock:
            if self._open_error is not None:
                raise SandboxError(
                    f"this session could not be opened: {type(self._open_error).__name__}: "
                    f"{self._open_error}"
                )
            if self._opened or self.closed:
                return
            try:
                if inputs is None:
                    max_pixels = self._config.max_input_pixels
                    inputs = [SessionInput.of(s, max_pixels) for s in self._sources or []]
                self._sources = None
                self._make_folders(sum(i.stored_bytes for i in inputs))
                self._store_inputs(inputs)
            except BaseException as exc:
                self._open_error = exc
                folders.remove_tree(self.dir)
                raise
            self._opened = True

    def _make_folders(self, input_bytes: int) -> None:
        """The session's folder, entered only by its uid; a quota-limited tmpfs as root."""
        cfg = self._config
        os.mkdir(self.dir, 0o700)
        gid, mode = (0, 0o711) if self.uid is None else (self.uid, 0o710)
        if self._sandbox.quotas:
            size_kb = (input_bytes >> 10) + (cfg.session_disk_mb << 10) + 64
            inodes = cfg.session_files + _OWN_FILES
            options = f"size={size_kb}k,nr_inodes={inodes},mode={mode:o},uid=0,gid={gid}"
            if not cfg.speed_tricks:
                folders.mount_tmpfs(self.dir, options)
            else:
                try:
                    folders.mount_tmpfs(self.dir, f"{options},{_HUGE_PAGES}")
                except OSError:  # a kernel without transparent huge pages for tmpfs
                    folders.mount_tmpfs(self.dir, options)
        else:
            os.chown(self.dir, 0, gid)
            os.chmod(self.dir, mode)
        for sub in (_INPUTS, _PIXELS):
            os.mkdir(os.path.join(self.dir, sub), 0o755)
        for sub in (_OUTPUT, "state"):
            path = os.path.join(self.dir, sub)
            os.mkdir(path, 0o700)
            if self.uid is not None:
                os.chown(path, self.uid, self.uid)

    def _store_inputs(self, inputs: list[SessionInput]) -> None:
        """Write a readable copy of each input image and its raw pixels (read-only to the code)."""
        for image, path, raw in zip(inputs, self.host_image_paths, self.pixel_files, strict=True):
            image.store(path, raw)
            for target in (path, raw):
                os.chmod(target, 0o644)

    def run(self, code: str) -> ExecResult:
        """Run `code` in the episode; never raises for anything the code does.

        Code repair runs first, inside the call's `timeout_s`: the worker gets what is left.
        """
        with self._lock:
            if self.closed:
                raise SandboxError("this session is closed; open a new one with Sandbox.session()")
            self.open()  # a deferred session's first call, when nothing opened it before
            start = time.monotonic()
            cfg = self._config
            if len(code) > cfg.max_code_chars:
                return ExecResult(
                    ok=False,
                    error=f"the code is {len(code)} characters long, over the sandbox's limit "
                    f"of {cfg.max_code_chars} (SandboxConfig.max_code_chars); write shorter code",
                )
            if self.calls >= cfg.max_calls_per_session:
                return ExecResult(
                    ok=False,
                    error=f"call limit reached: this session already ran {self.calls} calls "
                    f"(SandboxConfig.max_calls_per_session={cfg.max_calls_per_session})",
                )
            self.calls += 1
            code, repairs = self._repair(code)
            left = cfg.timeout_s - (time.monotonic() - start)
            if left <= 0:
                result = ExecResult(ok=False, error=results.timeout_text(cfg), timed_out=True)
            else:
                result = self._dispatch(self._request(code, left))
            result.repairs, result.code = repairs, code
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
                image_path=self.image_paths[0],
                output_dir=self.output_dir,
                config=self._config.repair,
                other_image_paths=self.image_paths[1:],
            )
        except Exception as exc:  # a repair bug must not cost the episode: run the code as given
            logger.exception("code repair failed; running the code unrepaired")
            return code, [f"code repair failed ({type(exc).__name__}); ran the code as given"]
        return result.code, result.changes

    def _request(self, code: str, timeout_s: float) -> RunRequest:
        cfg = self._config
        repair = cfg.repair
        return RunRequest(
            session=self.key,
            code=code,
            call=self.calls,
            uid=self.uid,
            image_paths=self.image_paths,
            pixel_files=self.pixel_files,
            image_sizes=[list(size) for size in self.image_sizes],
            out_dir=self.host_output_dir,
            output_dir=self.output_dir,
            state_path=self.state_path,
            carry=cfg.carry_variables,
            timeout_s=timeout_s,
            cpu_s=cfg.cpu_limit_s,
            memory_bytes=cfg.memory_mb << 20,
            max_file_bytes=cfg.max_file_mb << 20,
            max_processes=cfg.max_processes,
            max_stdout_chars=cfg.max_stdout_chars,
            max_images=cfg.max_images,
            max_image_pixels=cfg.max_image_pixels,
            max_state_bytes=cfg.max_state_mb << 20,
            max_result_bytes=results.max_result_bytes(cfg),
            clamp_crops=repair is not None and repair.clamp_crops,
            min_crop_size=repair.min_crop_size if repair is not None else 1,
        )

    def _dispatch(self, request: RunRequest) -> ExecResult:
        """Send to the pinned worker; resend once if it was already dead; replace it if needed."""
        cfg = self._config
        slot = self._slot
        with slot.lock:
            for attempt in (1, 2):
                worker = slot.ensure()
                if worker not in self._workers:
                    self._workers.append(worker)
                try:
                    worker.send(request.to_header(), time.monotonic() + cfg.startup_timeout_s)
                except WorkerDied as exc:
                    slot.replace()
                    if attempt == 2:
                        return ExecResult(ok=False, error=f"sandbox worker unavailable: {exc}")
                    continue
                break
            deadline = time.monotonic() + request.timeout_s + cfg.worker_grace_s
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
        return results.decode_result(frame, cfg, request.out_dir, request.call)

    def close(self) -> None:
        """End the episode: its processes are killed now; its folder is removed off this thread.

        A call of this session that is still running is waited for first.
        """
        with self._lock:
            if self.closed:
                return
            with self._open_lock:  # an `open()` under way ends first; none starts after this
                self.closed = True
        if self._workers:
            self._kill_processes()
        self._sandbox._release(self)

    def _kill_processes(self) -> None:
        """A save still running must not outlive its session, nor hold its uid for the next.

        Only a call sent to a worker can start a process of this session: a saver of that
        worker, which the worker kills when asked (`Worker.end_session`). Where one worker
        with seccomp (its children cannot make processes) ran every call and still runs, that
        is all; otherwise (a worker replaced meanwhile, no seccomp, no answer within
        `_END_SESSION_S`) every process in /proc is checked for the session's uid as well,
        about 1 ms with 70 processes.
        """
        worker, vouched = self._slot.worker, False
        if worker is not None and worker in self._workers:
            try:
                worker.end_session(self.key, time.monotonic() + _END_SESSION_S)
                vouched = worker.seccomp and len(self._workers) == 1
            except WorkerDied as exc:
                logger.warning("sandbox worker %d could not end a session: %s",
                               self._slot.index, exc)  # fmt: skip
        if not vouched and self.uid is not None:
            folders.kill_uid(self.uid)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
