"""The pre-forked sandbox worker: runs inside the jail, forks one locked-down child per call.

Started by `beacon.sandbox.pool` as `python -E -s worker.py` from the sandbox's `_code/` folder
(copies of this file, `child.py`, `outputs.py`, `crops.py` and `wire.py`), so it imports
nothing from `beacon`. It speaks the wire format on the descriptors it was started with:
requests on stdin, replies on stdout, and, on the two descriptors named by its arguments, the
trusted side's "end" messages for closed sessions, answered once their savers are killed
(`_end_session`).

Children come from a *template*: a process the worker forks right after its imports, before it
reads any request, and which afterwards only forks children on command and reaps them. A
worker serves many sessions, so its memory holds their requests (code, paths) and relayed
results; a child forked from the worker would inherit them all. A child forked from the
template holds nothing of any session but its own. The template hands each child's pipes and
pidfd to the worker with SCM_RIGHTS, and reports how each child ended on a pipe.

For each "run" request the worker:

1. hands the request, once the session's previous call has saved its variables, to a *spare*
   child forked ahead of time, which closed its inherited descriptors and waited, and which
   then applies rlimits, drops to the session's uid, loads the seccomp deny-list, and runs
   `episode` (carried variables, the code, images);
2. asks for the next spare while the code runs, reads the child's result from a pipe until it
   is complete, the child dies, or the wall-clock deadline passes (then SIGKILL), and relays
   the bytes, capped in size and never parsed here, to the trusted side. The answered child
   then saves its carried variables, bounded by the same deadline; the worker never waits for
   such a *saver*: it notices savers as they end and kills each at its deadline, whatever it
   is doing meanwhile, so a slow save delays no other session.

A session's calls take turns at its carried variables through the worker alone: a request
goes to its child only once the session's savers have ended (`_await_saves`), and the worker
remembers a session whose last call loaded its variables without saving its own
(`_Savers.lost`), which the next call's reply reports. No lock or marker in the session's
folder orders them: the code owns that folder and every descriptor its process holds, so it
could hold, release or rewrite either.

The child writes one marker byte once carried variables are restored; a child that dies or times
out before that has the state file deleted, so a poisoned pickle cannot wedge a session.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gc
import math
import mmap
import os
import resource
import select
import signal
import socket
import struct
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

import child as episode  # the call's half of the child (child.py)
import numpy as np
import wire

STATE_LOADED = b"\x01"
SETUP_FAILED = b"\x02"
DONE = b"\x00BEACON-RESULT-COMPLETE"
_END_LIMITS = wire.FrameLimits(max_header_bytes=1 << 12, max_blobs=0, max_total_bytes=0)
_CLONE_THREAD = 0x00010000
_PR_SET_PDEATHSIG = 1  # prctl options (linux/prctl.h, linux/seccomp.h)
_PR_SET_SECCOMP = 22
_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_MODE_FILTER = 2
_PID = struct.Struct("<q")
_EXIT = struct.Struct("<qi")  # a child's pid and wait status, from the template
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") >> 10
_CODE_DIR = os.path.dirname(os.path.abspath(__file__))  # the sandbox's _code/, writable
_libc = ctypes.CDLL(None, use_errno=True)
WARM_HEAP_BYTES = 16 << 20
"""Heap a spare faults in for the code (`warm_up`): more than the benchmark's heavy call
allocates (~10 MB), under the 32 MB above which malloc maps blocks apart
(`jail.MALLOC_TUNABLES`)."""
_DENIED_SYSCALLS = (
    # network
    "socket", "socketpair",
    # new programs and processes (threads stay allowed, see build_seccomp)
    "execve", "execveat", "fork", "vfork",
    # other processes and the kernel
    "ptrace", "process_vm_readv", "process_vm_writev", "kill", "tkill", "tgkill",
    "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_send_signal", "pidfd_getfd",
    "setsid", "setpgid", "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "bpf", "perf_event_open", "userfaultfd", "kexec_load", "kexec_file_load", "keyctl",
    "add_key", "request_key", "personality", "init_module", "finit_module", "delete_module",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "reboot", "swapon", "swapoff",
    "syslog", "acct", "quotactl", "open_by_handle_at", "name_to_handle_at",
    "settimeofday", "clock_settime", "sethostname", "setdomainname",
    # System V IPC and POSIX message queues: shared by every process of the worker's IPC
    # namespace, so by every session it serves, and counted in no memory limit
    "shmget", "shmat", "shmdt", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl",
    "semget", "semop", "semtimedop", "semctl", "ipc",
    "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
    # the new mount API
    "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
    # identity
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups",
    "setfsuid", "setfsgid", "capset",
    # scheduling: without a uid of its own (no root) the code could starve its worker
    "sched_setscheduler", "sched_setparam", "sched_setattr", "setpriority",
)  # fmt: skip


def main() -> None:
    """Serve requests until the trusted side closes the pipe or sends "exit"."""
    proto_in, proto_out = os.dup(0), os.dup(1)
    ends = _Ends(*(int(fd) for fd in sys.argv[1:3]))
    warm = wire.COLD not in sys.argv[3:]  # the speed tricks: gc.freeze, spares' warm-up
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # stray prints from libraries must not corrupt the protocol
    seccomp, seccomp_note = build_seccomp()
    if warm:
        gc.freeze()  # keep the collector from dirtying inherited pages in every child
    keep = (proto_in, proto_out, ends.requests, ends.replies)
    template = _Template.start(seccomp, keep=keep, warm=warm)
    ready = {"op": "ready", "pid": os.getpid(), "euid": os.geteuid(), "seccomp": seccomp_note}
    spare = template.fork_spare()
    savers = _Savers()
    wire.write_all(proto_out, wire.encode_frame(ready))
    while True:
        _await_request(proto_in, savers, ends)
        try:
            header = wire.read_frame(proto_in, wire.REQUEST_LIMITS).header
        except EOFError:
            header = {"op": "exit"}
        if header.get("op") == "exit":
            for child in (*savers.running, spare):
                child.dismiss()
            return
        accepted = wire.encode_frame({"op": "accepted"})
        try:
            request = wire.RunRequest.from_header(header)
        except (TypeError, ValueError) as exc:
            wire.write_all(proto_out, accepted)
            wire.write_all(proto_out, wire.encode_frame(_reply(error=f"bad request: {exc}"), [b""]))
            continue
        running = spare
        running.session = request.session
        if savers.busy(request.session):  # its previous call is still saving: its turn first
            wire.write_all(proto_out, accepted)
            _await_saves(request.session, savers, ends)
            running.start(request)
        else:
            running.start(request)  # the code starts before the caller hears back: one hop less
            wire.write_all(proto_out, accepted)
        lost = request.session in savers.lost
        savers.lost.discard(request.session)
        reply, payload = _supervise(running, request, savers, ends)
        wire.write_frame(proto_out, {**reply, "carried_lost": lost}, [payload])
        if not running.reaped:
            savers.add(running)
        spare = template.fork_spare()  # after the reply: no core taken from the call


class _Template:
    """The clean process that forks every child: it never holds any session's data.

    The children are the template's, so it reaps them; it reports each one's wait status on
    a pipe (`exit_code`), because the worker turns a crash, a CPU limit or a kill into the
    call's error text.
    """

    def __init__(self, pid: int, sock: socket.socket, exits: int) -> None:
        self.pid, self.sock, self.exits = pid, sock, exits
        self.statuses: dict[int, int] = {}  # reported, not asked for yet

    @classmethod
    def start(cls, seccomp: _Seccomp | None, keep: tuple[int, ...], warm: bool) -> _Template:
        """Fork the template; it closes the worker's descriptors in `keep`."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        exits_r, exits_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            for fd in (*keep, exits_r, ours.fileno()):
                os.close(fd)
            _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            try:
                _template_loop(theirs, exits_w, seccomp, warm)
            finally:
                os._exit(0)
        theirs.close()
        os.close(exits_w)
        return cls(pid, ours, exits_r)

    def fork_spare(self) -> _Spare:
        """A new spare, with the worker's ends of its pipes and its pidfd."""
        self.sock.sendall(b"f")
        data, fds, _, _ = socket.recv_fds(self.sock, _PID.size, 3)
        if len(data) != _PID.size or len(fds) != 3:
            raise RuntimeError("the template process stopped forking")
        return _Spare(_PID.unpack(data)[0], *fds, template=self)

    def exit_code(self, pid: int) -> int:
        """How child `pid` ended, once it has (negative: killed by that signal)."""
        while pid not in self.statuses:
            ended, status = _EXIT.unpack(wire.read_exact(self.exits, _EXIT.size))
            self.statuses[ended] = status
        return os.waitstatus_to_exitcode(self.statuses.pop(pid))


def _template_loop(sock: socket.socket, exits: int, seccomp: _Seccomp | None, warm: bool) -> None:
    """Fork one spare per command byte; reap each child as it ends and report its status."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    children: dict[int, int] = {}  # pidfd: pid
    template = os.getpid()
    while True:
        for fd, _ in poller.poll():
            if fd in children:
                pid = children.pop(fd)
                poller.unregister(fd)
                os.close(fd)
                wire.write_all(exits, _EXIT.pack(pid, os.waitpid(pid, 0)[1]))
            elif sock.recv(1):
                ctrl_r, ctrl_w = os.pipe()
                result_r, result_w = os.pipe()
                pid = os.fork()
                if pid == 0:
                    _child(ctrl_r, result_w, template, seccomp, warm)
                pidfd = os.pidfd_open(pid)  # before it can be reaped: never a reused pid
                socket.send_fds(sock, [_PID.pack(pid)], [ctrl_w, result_r, pidfd])
                for end in (ctrl_r, ctrl_w, result_r, result_w):
                    os.close(end)
                children[pidfd] = pid
                poller.register(pidfd, select.POLLIN)
            else:
                return


class _Spare:
    """A child forked ahead of the next request, waiting on a pipe for its code.

    Forking and tearing down a process that holds numpy, OpenCV and matplotlib costs several
    milliseconds; doing it between calls keeps it off the caller's clock. The spare has not
    dropped privileges yet, but it runs only this file's code until a request arrives. It is
    signalled through its pidfd only: the template reaps it, so its pid may be reused after.
    """

    def __init__(self, pid: int, ctrl_w: int, result_r: int, pidfd: int, template: _Template):
        self.pid, self.ctrl_w, self.result_r, self.pidfd = pid, ctrl_w, result_r, pidfd
        self.template = template
        self.reaped = False
        self.exit_code: int | None = None  # once reaped
        self.deadline = math.inf
        self.session = ""  # set once it has a request

    def start(self, request: wire.RunRequest) -> None:
        """Hand the request over; the call's wall-clock deadline starts now."""
        self.deadline = time.monotonic() + request.timeout_s
        with contextlib.suppress(OSError):  # a dead spare is reported by _supervise
            wire.write_all(self.ctrl_w, wire.encode_frame(request.to_header()))
        os.close(self.ctrl_w)
        self.ctrl_w = -1

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):  # it ended already
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def wait(self) -> int:
        """Wait for the child to end and return its exit code (negative: killed by that signal)."""
        self.exit_code = self.template.exit_code(self.pid)
        self.reaped = True
        return self.exit_code

    def dismiss(self) -> None:
        """Kill (if still running), wait for and close; safe to call twice."""
        if not self.reaped:
            self.kill()
            self.wait()
        for fd in (self.ctrl_w, self.result_r, self.pidfd):
            if fd >= 0:
                os.close(fd)
        self.ctrl_w = self.result_r = self.pidfd = -1


class _Savers:
    """Answered children still saving their sessions' variables, and `lost`: the sessions whose
    last call loaded their variables and ended without saving its own (it was killed at its
    deadline, crashed, or its save failed), whose next call is told so."""

    def __init__(self) -> None:
        self.running: list[_Spare] = []
        self.lost: set[str] = set()

    def add(self, saver: _Spare) -> None:
        self.running.append(saver)

    def busy(self, session: str) -> bool:
        return any(saver.session == session for saver in self.running)

    def deadline(self) -> float:
        return min((saver.deadline for saver in self.running), default=math.inf)

    def register(self, poller: select.poll) -> None:
        for saver in self.running:
            poller.register(saver.pidfd, select.POLLIN)

    def settle(self, ended: set[int]) -> bool:
        """Dismiss the savers that ended (pidfd in `ended`, or not alive) or are past their
        deadline, and note each one's outcome; whether there were any."""
        now, settled = time.monotonic(), False
        for saver in list(self.running):
            if saver.pidfd in ended or _readable(saver.pidfd) or now >= saver.deadline:
                saver.dismiss()  # killed first where it still runs
                self.running.remove(saver)
                self.record(saver.session, saved=saver.exit_code == 0)
                settled = True
        return settled

    def record(self, session: str, saved: bool) -> None:
        """The outcome of the session's latest call that loaded its variables."""
        if saved:
            self.lost.discard(session)
        else:
            self.lost.add(session)

    def end(self, session: str) -> int:
        """Kill and forget a closed session's savers; how many there were."""
        ended = [saver for saver in self.running if saver.session == session]
        for saver in ended:
            saver.dismiss()
            self.running.remove(saver)
        self.lost.discard(session)
        return len(ended)


def _await_request(proto_in: int, savers: _Savers, ends: _Ends) -> None:
    """Wait for the next request, reaping savers that end, killing those past deadline and
    those of sessions the trusted side ends."""
    while proto_in not in _serve_savers(savers, ends, proto_in):
        pass


def _await_saves(session: str, savers: _Savers, ends: _Ends) -> None:
    """Wait until `session` has no saver left (each ends or is killed at its deadline): its
    next call then loads what the last one saved. Other sessions are served meanwhile."""
    while savers.busy(session):
        _serve_savers(savers, ends)


def _serve_savers(savers: _Savers, ends: _Ends, fd: int | None = None) -> dict[int, int]:
    """One wait for `fd`, an "end" message, or a saver that ends or reaches its deadline;
    answers the message, settles the savers, and returns the events. It settles only after
    the wait: a caller checks what it waits for first, and an ended saver wakes it at once."""
    poller = select.poll()
    if fd is not None:
        poller.register(fd, select.POLLIN | select.POLLHUP)
    poller.register(ends.requests, select.POLLIN | select.POLLHUP)
    savers.register(poller)
    wake = savers.deadline() - time.monotonic()
    events = dict(poller.poll(None if wake == math.inf else max(wake, 0) * 1000))
    if ends.requests in events:
        _end_session(ends, savers)
    savers.settle(set(events))
    return events


@dataclass(frozen=True)
class _Ends:
    """The pipes of the trusted side's "end" messages: one in, one for the answers."""

    requests: int
    replies: int


def _end_session(ends: _Ends, savers: _Savers) -> None:
    """Kill the savers of the session named in the next "end" message, then answer.

    The trusted side's `Session.close` waits for the answer before the session's uid may go
    to another session: a session's processes are all savers of this worker (seccomp keeps
    its children from making any of their own). The trusted side gone, the worker goes too.
    """
    try:
        header = wire.read_frame(ends.requests, _END_LIMITS).header
    except EOFError:
        os._exit(0)  # the children die with it (PR_SET_PDEATHSIG)
    session = header.get("session")
    killed = savers.end(session) if isinstance(session, str) else 0
    wire.write_all(ends.replies, wire.encode_frame({"op": "ended", "session": session,
                                                     "killed": killed}))  # fmt: skip


def _readable(fd: int) -> bool:
    """Whether `fd` has something to read now: a pidfd whose process ended, a spare's request."""
    return bool(select.select([fd], [], [], 0)[0])


def _supervise(
    spare: _Spare,
    request: wire.RunRequest,
    savers: _Savers,
    ends: _Ends,
) -> tuple[dict, wire.Bytes]:
    """Collect the child's output until it is complete, the child dies, or the deadline passes.

    A child that wrote its whole result (ending in DONE) is answered for at once; it saves the
    carried variables and exits while the caller reads the result. Meanwhile the savers of
    other sessions are reaped when they end and killed at their own deadlines. A child that
    loaded its session's variables and ends here (killed, crashed, or its save failed at
    once) leaves them unsaved: `savers.lost` notes it for the session's next call.
    """
    cap = request.max_result_bytes
    data, timed_out, overflow, closed = bytearray(), False, False, False
    while not closed:
        poller = select.poll()
        poller.register(spare.result_r, select.POLLIN)
        poller.register(spare.pidfd, select.POLLIN)
        poller.register(ends.requests, select.POLLIN | select.POLLHUP)
        savers.register(poller)
        left = min(spare.deadline, savers.deadline()) - time.monotonic()
        events = dict(poller.poll(left * 1000)) if left > 0 else {}
        if ends.requests in events:
            _end_session(ends, savers)  # another session's: this one is still running
            continue
        if savers.settle(set(events)):
            continue
        if not events:
            timed_out = True
            break
        if spare.pidfd in events:
            break  # exited; what it wrote is drained below
        closed = not _drain(spare.result_r, data, cap, block=True)
        if len(data) > cap:
            overflow = True
            break
        if data.endswith(DONE):
            break
    complete = data.endswith(DONE) and not overflow
    code = 0
    if not complete:
        spare.kill()
        code = spare.wait()
        if not (timed_out or overflow):
            _drain(spare.result_r, data, cap, block=False)
            overflow = len(data) > cap
            # exited after its whole result (a save that failed at once): it did answer
            code = 0 if data.endswith(DONE) and not overflow else code
    if data.endswith(DONE):
        del data[-len(DONE) :]
    loaded = data[:1] == STATE_LOADED
    if loaded and request.carry and spare.reaped:
        savers.record(request.session, saved=spare.exit_code == 0)
    state_dropped = False
    if not loaded and (timed_out or code != 0):
        state_dropped = _drop_state(request.state_path)
    setup_error = None
    if data[:1] == SETUP_FAILED:
        setup_error = bytes(data[1:2000]).decode("utf-8", "replace")
    payload = b"" if overflow or not loaded else memoryview(data)[1:]
    return (
        _reply(
            exit_code=code,
            timed_out=timed_out,
            overflow=overflow,
            state_dropped=state_dropped,
            setup_error=setup_error,
        ),
        payload,
    )


def _drain(fd: int, data: bytearray, cap: int, block: bool) -> bool:
    """Append what is readable on `fd`; False once the writer has closed it."""
    os.set_blocking(fd, block)
    try:
        while len(data) <= cap:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return False
            data += chunk
            if block:
                return True
    except BlockingIOError:
        return True
    return True


def _drop_state(path: str) -> bool:
    """Delete a state file; a folder the code put there is renamed out of the way instead
    (the session's quota bounds it, and its folder goes when the session closes)."""
    try:
        os.unlink(path)
    except IsADirectoryError:
        try:
            os.rename(path, f"{path}.{time.monotonic_ns()}.dropped")
        except OSError:
            return False
    except OSError:
        return False
    return True


def _reply(**fields: Any) -> dict[str, Any]:
    base = {"op": "result", "exit_code": None, "timed_out": False, "overflow": False}
    return {**base, "state_dropped": False, "carried_lost": False, "rss_kb": _memory_kb()[1],
            **fields}  # fmt: skip


def _memory_kb() -> tuple[int, int]:
    """This process's virtual size and resident memory in KB (`/proc/self/statm`: one line)."""
    fd = os.open("/proc/self/statm", os.O_RDONLY)
    try:
        size, resident = os.read(fd, 256).split()[:2]
    finally:
        os.close(fd)
    return int(size) * _PAGE_KB, int(resident) * _PAGE_KB


def build_seccomp() -> tuple[_Seccomp | None, str]:
    """Compile the deny-list to BPF once; each child then loads it with two prctls."""
    try:
        import pyseccomp as sc
    except (ImportError, RuntimeError) as exc:
        return None, f"unavailable: {exc}"
    filt = sc.SyscallFilter(sc.ALLOW)
    for name in _DENIED_SYSCALLS:
        try:
            filt.add_rule(sc.ERRNO(errno.EPERM), name)
        except (OSError, ValueError, RuntimeError):
            continue  # syscall does not exist on this architecture
    # clone without CLONE_THREAD makes a process; clone3 hides its flags from seccomp, so it
    # reports ENOSYS and glibc falls back to clone for threads.
    filt.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, _CLONE_THREAD, 0))
    filt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    with open(os.memfd_create("beacon-bpf"), "w+b") as f:
        filt.export_bpf(f)
        f.seek(0)
        return _Seccomp(f.read()), "deny-list"


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


class _Seccomp:
    """A BPF program (8 bytes per instruction) in the `sock_fprog` that prctl takes.

    Compiled once in the worker, before the template forks: a child's lock-down only loads it
    (compiling it with libseccomp in every child would be on every call's clock).
    """

    def __init__(self, program: bytes) -> None:
        self._code = ctypes.create_string_buffer(program, len(program))
        self._fprog = _SockFprog(len(program) // 8, ctypes.addressof(self._code))

    def load(self) -> None:
        """Install the program, after PR_SET_NO_NEW_PRIVS (which seccomp requires unprivileged)."""
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(self._fprog), 0, 0):
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")


def _child(ctrl_r: int, result_w: int, template: int, seccomp: _Seccomp | None, warm: bool) -> None:
    """The spare's life: warm up (when `warm`), wait for a request, lock down, run the code,
    report. Never returns."""
    try:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # die with the template
        if os.getppid() != template:
            os._exit(0)
        _detach(ctrl_r, result_w)
        if warm:
            warm_up(ctrl_r, _CODE_DIR)
        request = wire.read_request(ctrl_r)
        os.close(ctrl_r)
        _lock_down(request, seccomp)
    except EOFError:
        os._exit(0)  # dismissed without a request
    except BaseException:
        wire.write_all(result_w, SETUP_FAILED + traceback.format_exc()[-1500:].encode())
        os._exit(70)
    try:
        ep = episode.prepare(request)
        wire.write_all(result_w, STATE_LOADED)
        wire.write_parts(result_w, [*episode.execute(ep), DONE])
        os.close(result_w)
        if request.carry:  # after the result is out, while the caller reads it
            episode.save_state(ep)
    except BaseException:
        os._exit(70)
    os._exit(0)


def warm_up(request_fd: int, scratch: str) -> None:
    """Take a call's first-touch costs off its clock while the spare waits for its request
    (docs/sandbox.md, "Speed"): a rehearsal of a call (`episode.rehearse`: a fresh fork copies
    each page it shares with the template on its first write to it), then `WARM_HEAP_BYTES` of
    heap, faulted in and freed. Under `jail.MALLOC_TUNABLES` that block is on huge pages and
    stays in the heap once freed, so the code's first allocations reuse it instead of faulting,
    4 KB at a time, on pages of the template's heap. A request that comes meanwhile waits for
    the step under way (a few ms).
    """
    if not _readable(request_fd):
        with contextlib.suppress(Exception):  # it only saves time (tested on its own)
            episode.rehearse(scratch)
    if not _readable(request_fd):
        np.empty(WARM_HEAP_BYTES, np.uint8)[:: mmap.PAGESIZE] = 0  # one write per page


def _detach(*keep: int) -> None:
    """No inherited descriptors but `keep`."""
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)


def _lock_down(request: wire.RunRequest, seccomp: _Seccomp | None) -> None:
    """rlimits, the session's folder and uid, then the seccomp filter (last: it denies setuid)."""
    limits = {
        resource.RLIMIT_AS: _memory_kb()[0] * 1024 + request.memory_bytes,
        resource.RLIMIT_CPU: math.ceil(request.cpu_s),
        resource.RLIMIT_FSIZE: request.max_file_bytes,
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_NPROC: request.max_processes,
        resource.RLIMIT_NOFILE: 256,
    }
    for which, value in limits.items():
        hard = value + 1 if which == resource.RLIMIT_CPU else value
        resource.setrlimit(which, (value, hard))
    os.chdir(request.out_dir)
    os.umask(0o077)
    uid = request.uid
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    if seccomp is not None:
        seccomp.load()


if __name__ == "__main__":
    main()
