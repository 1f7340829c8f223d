"""One jailed worker process seen from the trusted side: start, request, replace.

The trusted side talks to the worker over its stdin/stdout pipes with `wire` frames. A request
is first acknowledged ("accepted"), which separates "the worker was already dead, resend" from
"the worker died while running the code, report it". Every reply is read with a deadline; a
worker that misses it is killed (its whole process group) and started again. Two more pipes
carry "end" messages for closed sessions (`Worker.end_session`), answered between calls and
during them, so that closing a session never waits for another session's call.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from beacon.sandbox import wire
from beacon.sandbox.config import SandboxError
from beacon.sandbox.jail import jail_prefix, worker_env

logger = logging.getLogger(__name__)

_CONTROL_LIMITS = wire.FrameLimits(max_header_bytes=1 << 16, max_blobs=0, max_total_bytes=0)


class WorkerDied(RuntimeError):
    """The worker process ended or stopped answering."""


def seccomp_refusal(note: object) -> str:
    """Why a worker without its seccomp deny-list is not used, and the two ways on."""
    return (
        f"the sandbox worker could not load its seccomp deny-list ({note}). Without it, model "
        "code could open sockets, run programs, fork, and leave its process group (setsid), so "
        "Beacon does not run code there. Install libseccomp (apt-get install libseccomp2) and "
        "pyseccomp, or set sandbox.require_seccomp=false to run with namespaces and rlimits "
        "only, at your own risk."
    )


class Worker:
    """A pre-forked worker in the jail. Not thread-safe: `WorkerSlot` serializes its use."""

    def __init__(
        self,
        isolation: str,
        root_dir: str,
        startup_timeout_s: float,
        require_seccomp: bool = True,
        speed_tricks: bool = True,
    ) -> None:
        self.require_seccomp = require_seccomp
        code_dir = os.path.join(root_dir, "_code")
        self._stderr_path = os.path.join(code_dir, f"worker-{id(self)}.log")
        cmd = [*jail_prefix(isolation, root_dir), sys.executable, "-E", "-s"]
        ends_r, self._ends_w = os.pipe()
        self._ended_r, ended_w = os.pipe()
        os.set_blocking(self._ends_w, False)  # a worker that stopped reading fails, not blocks
        cmd += [os.path.join(code_dir, "worker.py"), str(ends_r), str(ended_w)]
        cmd += [] if speed_tricks else [wire.COLD]
        try:
            with open(self._stderr_path, "wb") as stderr:
                self.proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    env=worker_env(root_dir, speed_tricks),
                    cwd="/",
                    start_new_session=True,
                    pass_fds=(ends_r, ended_w),
                )
        except BaseException:
            os.close(self._ends_w)
            os.close(self._ended_r)
            raise
        finally:
            os.close(ends_r)
            os.close(ended_w)
        self._ends_lock = threading.Lock()
        self.seccomp = False  # known once it is ready
        self.pid = self.proc.pid  # the worker itself once it is ready (bwrap forks twice)
        self._pidfd = -1  # the worker's, once it is ready: readable when it has ended
        self.rss_kb = 0
        self._ready_deadline = time.monotonic() + startup_timeout_s

    def wait_ready(self) -> dict[str, Any]:
        """Block until the worker has imported its libraries and said "ready"."""
        try:
            header = self._read(self._ready_deadline, _CONTROL_LIMITS).header
        except WorkerDied as exc:
            log = Path(self._stderr_path).read_text(errors="replace")[-2000:]
            self.kill()
            raise SandboxError(f"sandbox worker failed to start ({exc}). Its log:\n{log}") from exc
        if header.get("op") != "ready":
            self.kill()
            raise SandboxError(f"sandbox worker sent {header!r} instead of 'ready'")
        self.seccomp = header.get("seccomp") == "deny-list"
        if not self.seccomp:
            if self.require_seccomp:
                self.kill()
                raise SandboxError(seccomp_refusal(header.get("seccomp")))
            logger.warning("sandbox worker runs WITHOUT seccomp: %s", header.get("seccomp"))
        self.pid = _python_descendant(self.proc.pid)
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except OSError as exc:  # it ended meanwhile
            self.kill()
            raise SandboxError(f"sandbox worker ended right after starting ({exc})") from exc
        return header

    def alive(self) -> bool:
        """Whether the worker still runs (checked before every call): its pidfd is readable
        once it has ended."""
        if self.proc.poll() is not None:
            return False
        if self._pidfd < 0:
            return True
        poller = select.poll()  # not select(): the host may hold over 1024 descriptors
        poller.register(self._pidfd, select.POLLIN)
        return not poller.poll(0)

    def send(self, header: dict[str, Any], ack_deadline: float) -> None:
        """Send a request and wait for its acknowledgement; WorkerDied if it never comes."""
        try:
            wire.write_all(self.proc.stdin.fileno(), wire.encode_frame(header))
        except OSError as exc:
            raise WorkerDied(f"cannot write to the worker: {exc}") from exc
        ack = self._read(ack_deadline, _CONTROL_LIMITS).header
        if ack.get("op") != "accepted":
            raise WorkerDied(f"worker answered {ack.get('op')!r} instead of 'accepted'")

    def receive(self, deadline: float, limits: wire.FrameLimits) -> wire.Frame:
        frame = self._read(deadline, limits)
        if frame.header.get("op") != "result":
            raise WorkerDied(f"worker answered {frame.header.get('op')!r} instead of 'result'")
        rss = frame.header.get("rss_kb")
        self.rss_kb = rss if type(rss) is int else 0
        return frame

    def end_session(self, session: str, deadline: float) -> int:
        """Have the worker kill and reap the session's savers; returns how many there were.

        WorkerDied if it does not answer by `deadline` (then its answer, should it come later,
        is skipped by the next call).
        """
        with self._ends_lock:
            try:
                wire.write_all(self._ends_w, wire.encode_frame({"op": "end", "session": session}))
                while True:
                    answer = wire.read_frame(self._ended_r, _CONTROL_LIMITS, deadline).header
                    if answer.get("session") == session:
                        break
            except (OSError, EOFError, TimeoutError, wire.WireError) as exc:
                raise WorkerDied(f"the worker did not end session {session}: {exc!r}") from exc
        killed = answer.get("killed")
        if answer.get("op") != "ended" or type(killed) is not int:
            raise WorkerDied(f"the worker answered {answer!r} to 'end'")
        return killed

    def _read(self, deadline: float, limits: wire.FrameLimits) -> wire.Frame:
        try:
            return wire.read_frame(self.proc.stdout.fileno(), limits, deadline)
        except (EOFError, OSError) as exc:
            raise WorkerDied(f"the worker process ended ({exc})") from exc
        except TimeoutError as exc:
            raise WorkerDied("the worker did not answer in time") from exc
        except wire.WireError as exc:
            raise WorkerDied(f"the worker sent a malformed frame ({exc})") from exc

    def close(self) -> None:
        """Ask the worker to exit, then make sure its whole process group is gone."""
        if self.alive():
            try:
                wire.write_all(self.proc.stdin.fileno(), wire.encode_frame({"op": "exit"}))
                self.proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def kill(self) -> None:
        """SIGKILL the worker and its jail; its children follow (PR_SET_PDEATHSIG)."""
        for kill, target in ((os.kill, self.pid), (os.killpg, self.proc.pid)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(target, signal.SIGKILL)
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            stream.close()
        with self._ends_lock:  # once: a second `kill` must not close reused descriptor numbers
            for fd in (self._ends_w, self._ended_r, self._pidfd):
                if fd >= 0:
                    os.close(fd)
            self._ends_w = self._ended_r = self._pidfd = -1
        Path(self._stderr_path).unlink(missing_ok=True)


def _python_descendant(pid: int) -> int:
    """Follow the first child of each launcher process (bwrap, unshare) down to the worker."""
    for _ in range(4):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            return pid
        if comm not in ("bwrap", "unshare") or not children:
            return pid
        pid = int(children[0])
    return pid


class WorkerSlot:
    """A place for one worker; the worker in it is replaced when it dies or grows too large."""

    def __init__(self, index: int, start: Any) -> None:
        self.index = index
        self.lock = threading.Lock()
        self.sessions = 0  # open sessions pinned here; guarded by the Sandbox's lock
        self._start = start
        self.worker: Worker | None = None

    def ensure(self) -> Worker:
        """The slot's live worker, starting a new one if there is none."""
        if self.worker is not None and not self.worker.alive():
            logger.warning("sandbox worker %d (pid %d) died; replacing it", self.index, self.pid)
            self.replace()
        if self.worker is None:
            worker = self._start()
            worker.wait_ready()
            self.worker = worker
        return self.worker

    def replace(self) -> None:
        if self.worker is not None:
            self.worker.kill()
        self.worker = None

    @property
    def pid(self) -> int:
        return self.worker.pid if self.worker is not None else -1
