"""Helper processes that run math-verify checks and can be killed when they overrun.

Why processes: a thread cannot stop sympy. `10^{10^{10}}` makes it compute a huge integer power
in C while holding the GIL, so even the caller's `Thread.join(timeout)` never returns (found by
fuzzing `verify`). Each helper is a long-lived `python -m beacon.verify.mathhelper` that reads
one JSON request per line (`[pred, gold]`) on stdin and writes one JSON line (true / false /
null) on stdout. A helper that does not answer within the budget is killed and replaced on the
next call, so a check costs one pipe round trip (~0.1 ms) and a runaway one costs its budget.

Plain subprocesses rather than `multiprocessing`: spawn/forkserver re-import the caller's
`__main__` (breaking scripts without a main guard), and fork is unsafe in a threaded evaluator.

Limits: POSIX only (`select` on a pipe). When a helper cannot be started (no `fork`/`exec`
allowed, a daemonic parent), `MathWorkerPool.check` raises `WorkerUnavailable` and the caller
falls back to an in-process thread.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import IO

logger = logging.getLogger(__name__)

HELPER_MODULE = "beacon.verify.mathhelper"  # the helper's main: `serve` with the math check
STARTUP_TIMEOUT_S = 60.0  # importing sympy + math-verify in a fresh interpreter, on a busy host


class WorkerUnavailable(RuntimeError):
    """A helper process could not be started."""


class Overran(Exception):
    """The helper gave no answer within the budget and was killed."""


class MathWorker:
    """One helper process and its pipes; used by one thread at a time."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", HELPER_MODULE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=env,
            )
        except OSError as error:
            raise WorkerUnavailable(f"cannot start the math-verify helper: {error}") from error
        if self._read_line(STARTUP_TIMEOUT_S) != "ready":
            self.kill()
            raise WorkerUnavailable("the math-verify helper did not start")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def _read_line(self, timeout_s: float) -> str | None:
        stdout: IO[str] = self.proc.stdout  # type: ignore[assignment]
        ready, _, _ = select.select([stdout], [], [], timeout_s)
        if not ready:
            return None
        line = stdout.readline()
        return line.strip() if line else None

    def ask(self, pred: str, gold: str, time_budget_s: float) -> bool | None:
        """The helper's answer; raises `Overran` (and kills the helper) when it has none."""
        try:
            self.proc.stdin.write(json.dumps([pred, gold]) + "\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError) as error:
            self.kill()
            raise Overran("the helper had exited") from error
        line = self._read_line(time_budget_s)
        if line is None:
            self.kill()
            raise Overran(f"no answer within {time_budget_s:.1f} s")
        try:
            answer = json.loads(line)
        except ValueError as error:
            self.kill()
            raise Overran(f"unreadable answer {line[:80]!r}") from error
        return answer if answer in (True, False, None) else None

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


class MathWorkerPool:
    """At most `size` helpers, started on demand and reused; safe to call from many threads."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._start_fresh()
        atexit.register(self.close)

    def _start_fresh(self) -> None:
        """Forget all helpers. Also run in a forked child: the parent's helpers and locks are
        the parent's (two processes writing to one helper's pipe would mix their answers)."""
        self._pid = os.getpid()
        self._slots = threading.BoundedSemaphore(self.size)
        self._idle: list[MathWorker] = []
        self._lock = threading.Lock()

    def check(self, pred: str, gold: str, time_budget_s: float) -> bool | None:
        """One check on an idle (or new) helper; raises `Overran` or `WorkerUnavailable`."""
        if self._pid != os.getpid():
            self._start_fresh()
        with self._slots:
            with self._lock:
                worker = self._idle.pop() if self._idle else None
            if worker is None or not worker.alive:
                worker = MathWorker()
            result = worker.ask(pred, gold, time_budget_s)
            with self._lock:
                self._idle.append(worker)
            return result

    def close(self) -> None:
        if self._pid != os.getpid():
            return
        with self._lock:
            workers, self._idle = self._idle, []
        for worker in workers:
            worker.kill()


def serve(compare: Callable[[str, str], bool | None], warm_up: Callable[[], object]) -> None:
    """A helper's loop: answer `[pred, gold]` lines with ``compare`` until stdin closes.

    ``warm_up`` runs before the helper says "ready" (it imports sympy and math-verify). The
    helper's main module (`beacon.verify.mathhelper`) passes the math check in, so this module
    imports nothing of `beacon.verify` and the checker imports this one without a cycle.
    """
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout = sys.stderr  # anything a library prints must not corrupt the replies
    warm_up()
    replies.write("ready\n")
    replies.flush()
    for line in sys.stdin:
        pred, gold = json.loads(line)
        try:
            result = compare(pred, gold)
        except Exception:
            result = None
        replies.write(json.dumps(result) + "\n")
        replies.flush()
