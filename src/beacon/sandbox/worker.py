"""The pre-forked sandbox worker: runs inside the jail, forks one locked-down child per call.

Started by `beacon.sandbox.pool` as `python -E -s worker.py` from the sandbox's `_code/` folder
(copies of this file, `episode.py`, `outputs.py`, `crops.py`, `pixels.py` and `wire.py`), so it
imports nothing from `beacon`. It speaks the wire format on the descriptors it was started with:
requests on stdin, replies on stdout, and, on the two descriptors named by its arguments, the
trusted side's "end" messages for closed sessions, answered once their savers are killed
(`_end_session`).

Children come from a *template*: a process the worker forks right after its imports, before it
reads any request, and which afterwards only ever reads one-byte "fork" commands. A worker
serves many sessions, so its memory holds their requests (code, paths) and relayed results;
a child forked from the worker would inherit them all. A child forked from the template holds
nothing of any session but its own. The template clones each child with CLONE_PARENT, so that
the child is the worker's (which reaps it and reads its exit status) without a second fork;
the template hands the child's pipes over with SCM_RIGHTS.

For each "run" request the worker:

1. hands the request to a *spare* child forked ahead of time, which detaches (own process
   group, no inherited descriptors) and waits, then applies rlimits, drops to the session's
   uid, loads the seccomp deny-list, and runs `episode` (carried variables, the code, images);
2. asks for the next spare while the code runs, reads the child's result from a pipe until it
   is complete, the child dies, or the wall-clock deadline passes (then SIGKILL to the child's
   process group), and relays the bytes, capped in size and never parsed here, to the trusted
   side. The answered child then saves its carried variables (at idle priority at first,
   `_SAVER_IDLE_S`), bounded by the same deadline; the worker never waits for such a
   *saver*: it reaps savers as they end and kills each at its deadline, whatever it is doing
   meanwhile, so a slow save delays no other session.

The child writes one marker byte once carried variables are restored; a child that dies or times
out before that has the state file deleted, so a poisoned pickle cannot wedge a session.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import gc
import math
import os
import platform
import random
import resource
import select
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

import episode
import wire

STATE_LOADED = b"\x01"
SETUP_FAILED = b"\x02"
DONE = b"\x00BEACON-RESULT-COMPLETE"
_END_LIMITS = wire.FrameLimits(max_header_bytes=1 << 12, max_blobs=0, max_total_bytes=0)
_SAVER_IDLE_S = 0.01
"""How long an answered child saves its variables at SCHED_IDLE (where the worker may set it).

A session's next call often starts at once; beside a save at normal priority (pickling and
writing a 1200x900 crop, ~2 ms) its code ran 1-2 ms slower, back to back. Idle, the save takes
only what no call wants. After this long it is normal again: a call waiting for that save (its
code reads a carried variable) waits at most this much longer, even with every core busy."""
_F_SETPIPE_SZ = 1031
_CLONE_THREAD = 0x00010000
_PR_SET_PDEATHSIG = 1
_PR_SET_SECCOMP = 22
_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_MODE_FILTER = 2
_CLONE_PARENT = 0x00008000
_SYS_CLONE = {"x86_64": 56, "aarch64": 220, "riscv64": 220, "ppc64le": 120}.get(platform.machine())
_PID = struct.Struct("<q")
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
_PAGE_KB = _PAGE_SIZE >> 10
_CODE_DIR = os.path.dirname(os.path.abspath(__file__))  # the sandbox's _code/, writable
_libc = ctypes.CDLL(None, use_errno=True)
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = (ctypes.c_size_t,)
_M_TRIM_THRESHOLD = -1  # mallopt parameters (glibc malloc.h)
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 32 << 20  # glibc's largest; smaller blocks come from the pre-faulted heap
_HEAP_BYTES = 30 << 20  # heap kept on transparent huge pages: under _MMAP_THRESHOLD
_PREFAULT_BYTES = 12 << 20  # of it faulted in ahead: a 1200x900 crop, its resize and the copy
_HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = 14
_MADV_POPULATE_WRITE = 23
_DENIED_SYSCALLS = (
    # network
    "socket", "socketpair",
    # new programs and processes (threads stay allowed, see _build_seccomp)
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
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # stray prints from libraries must not corrupt the protocol
    seccomp, seccomp_note = _build_seccomp()
    gc.freeze()  # keep the collector from dirtying inherited pages in every child
    keep = (proto_in, proto_out, ends.requests, ends.replies)
    template = _Template.start(seccomp, keep=keep, idle_spares=_can_wake_idle())
    ready = {"op": "ready", "pid": os.getpid(), "euid": os.geteuid(), "seccomp": seccomp_note}
    template.order_spare()
    spare = template.take_spare()
    savers: list[_Spare] = []  # answered children, maybe still saving their variables
    wire.write_all(proto_out, wire.encode_frame(ready))
    while True:
        _await_request(proto_in, savers, ends)
        try:
            header = wire.read_frame(proto_in, wire.REQUEST_LIMITS).header
        except EOFError:
            header = {"op": "exit"}
        if header.get("op") == "exit":
            for child in (*savers, spare):
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
        running.start(request)  # the code starts before the caller hears back: one hop less
        template.order_spare()  # forked on the other core while this code runs
        wire.write_all(proto_out, accepted)
        reply, payload = _supervise(running, request, savers, ends)
        wire.write_frame(proto_out, reply, [payload])
        if not running.reaped:
            running.session = request.session
            if template.idle_spares:
                running.idle_until = time.monotonic() + _SAVER_IDLE_S
                with contextlib.suppress(ProcessLookupError):  # it ended: _settle reaps it
                    _set_idle(running.pid, True)
            savers.append(running)
        spare = template.take_spare()


class _Template:
    """The clean process that forks every child: it never holds any session's data."""

    def __init__(self, pid: int, sock: socket.socket, idle_spares: bool) -> None:
        self.pid, self.sock, self.idle_spares = pid, sock, idle_spares

    @classmethod
    def start(cls, seccomp: _Seccomp | None, keep: tuple[int, ...], idle_spares: bool) -> _Template:
        """Fork the template; `idle_spares`: spares warm up at idle priority (`_child`)."""
        if _SYS_CLONE is None:
            raise RuntimeError(
                f"the sandbox worker does not know the clone syscall on {platform.machine()}; "
                "it runs on x86_64, aarch64, riscv64 and ppc64le"
            )
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        worker = os.getpid()
        pid = os.fork()
        if pid == 0:
            ours.close()
            for fd in keep:
                os.close(fd)
            _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if idle_spares:
                _set_idle(0, True)
            try:
                _template_loop(theirs, worker, seccomp)
            finally:
                os._exit(0)
        theirs.close()
        return cls(pid, ours, idle_spares)

    def order_spare(self) -> None:
        """Ask for the next spare; the template forks it while the worker goes on."""
        self.sock.sendall(b"f")

    def take_spare(self) -> _Spare:
        """The spare last ordered: a child of this worker, with the worker's ends of its pipes.

        An idle template still forking it is moved to normal scheduling meanwhile: the worker
        waits for it, and on a busy machine an idle process may wait long for a core. The spare
        then inherited normal scheduling, and is made idle here, where nothing races with it
        (`_Spare.start`, on this thread, moves it back).
        """
        hurry = self.idle_spares and not _readable(self.sock.fileno())
        if hurry:
            _set_idle(self.pid, False)
        data, fds, _, _ = socket.recv_fds(self.sock, _PID.size, 2)
        if len(data) != _PID.size or len(fds) != 2:
            raise RuntimeError("the template process stopped forking")
        spare = _Spare(_PID.unpack(data)[0], *fds, idle=self.idle_spares)
        if hurry:
            _set_idle(self.pid, True)
            with contextlib.suppress(ProcessLookupError):  # a dead spare: see _supervise
                _set_idle(spare.pid, True)
        return spare


def _template_loop(sock: socket.socket, worker: int, seccomp: _Seccomp | None) -> None:
    """Fork one spare per command byte, as a child of the worker."""
    while sock.recv(1):
        ctrl_r, ctrl_w = os.pipe()
        result_r, result_w = os.pipe()
        with contextlib.suppress(OSError):
            fcntl.fcntl(result_w, _F_SETPIPE_SZ, 1 << 20)  # fewer wake-ups for image bytes
        spare = _fork_sibling()
        if spare == 0:
            for fd in (ctrl_w, result_r, sock.fileno()):
                os.close(fd)
            _child(ctrl_r, result_w, worker, seccomp)
        os.close(ctrl_r)
        os.close(result_w)
        socket.send_fds(sock, [_PID.pack(spare)], [ctrl_w, result_r])
        os.close(ctrl_w)
        os.close(result_r)


def _fork_sibling() -> int:
    """`os.fork()`, except that the child's parent is ours (clone with CLONE_PARENT): 0 in the
    child, its pid here.

    The worker must be the child's parent to reap it and read how it ended. Forking through a
    middle process that exits (re-parenting the child to the worker as a subreaper) cost the
    template ~3.5 ms more per call (a second fork and exit of a ~80 MB process: 4.8-5.0 vs
    1.3-1.5 ms of CPU). `os.fork` takes no flags, so this is the raw syscall. It skips what
    `os.fork` does in the child's interpreter: re-initialising locks that other threads may hold
    (the template has no other thread) and running the at-fork hooks, of which `random`'s
    reseed matters to the code (each child draws its own numbers); it is done here.
    """
    flags = ctypes.c_long(_CLONE_PARENT | signal.SIGCHLD)
    zero = ctypes.c_long(0)
    pid = _libc.syscall(ctypes.c_long(_SYS_CLONE), flags, zero, zero, zero, zero)
    if pid < 0:
        raise OSError(ctypes.get_errno(), "clone(CLONE_PARENT) failed")
    if pid == 0:
        random.seed()
    return pid


class _Spare:
    """A child forked ahead of the next request, waiting on a pipe for its code.

    Forking and tearing down a process that holds numpy, OpenCV and matplotlib costs several
    milliseconds; doing it between calls keeps it off the caller's clock. The spare has not
    dropped privileges yet, but it runs only this file's code until a request arrives.
    """

    def __init__(self, pid: int, ctrl_w: int, result_r: int, idle: bool) -> None:
        self.pid, self.ctrl_w, self.result_r, self.idle = pid, ctrl_w, result_r, idle
        self.pidfd = os.pidfd_open(pid)
        self.reaped = False
        self.deadline = math.inf
        self.session = ""  # set once it has answered a request
        self.idle_until = math.inf  # a saver at SCHED_IDLE until then (`_SAVER_IDLE_S`)

    def start(self, request: wire.RunRequest) -> None:
        """Hand the request over; the call's wall-clock deadline starts now.

        An idle spare is moved back to normal scheduling first: one still warming up (starved
        on a busy machine) then ends its warm-up at full speed before it reads the request.
        """
        self.deadline = time.monotonic() + request.timeout_s
        if self.idle:
            with contextlib.suppress(ProcessLookupError):  # a dead spare: see _supervise
                _set_idle(self.pid, False)
        with contextlib.suppress(OSError):  # a dead spare is reported by _supervise
            wire.write_all(self.ctrl_w, wire.encode_frame(request.to_header()))
        os.close(self.ctrl_w)
        self.ctrl_w = -1

    @property
    def wake(self) -> float:
        """When the worker must next act on this saver: its deadline or the end of its idling."""
        return min(self.deadline, self.idle_until)

    def wait(self) -> int:
        """Reap the child and return its exit code (negative: killed by that signal)."""
        _, status = os.waitpid(self.pid, 0)
        self.reaped = True
        return os.waitstatus_to_exitcode(status)

    def dismiss(self) -> None:
        """Kill (if still running), reap and close; safe to call twice."""
        if not self.reaped:
            _kill_group(self.pid)
            self.wait()
        for fd in (self.ctrl_w, self.result_r, self.pidfd):
            if fd >= 0:
                os.close(fd)
        self.ctrl_w = self.result_r = self.pidfd = -1


def _await_request(proto_in: int, savers: list[_Spare], ends: _Ends) -> None:
    """Wait for the next request, reaping savers that end, killing those past deadline and
    those of sessions the trusted side ends."""
    while True:
        _settle(savers, set())
        _end_idle(savers)
        wake = min((s.wake for s in savers), default=math.inf) - time.monotonic()
        poller = select.poll()
        poller.register(proto_in, select.POLLIN | select.POLLHUP)
        poller.register(ends.requests, select.POLLIN | select.POLLHUP)
        for saver in savers:
            poller.register(saver.pidfd, select.POLLIN)
        events = dict(poller.poll(None if wake == math.inf else max(wake, 0) * 1000))
        if ends.requests in events:
            _end_session(ends, savers)
        if proto_in in events:
            return


@dataclass(frozen=True)
class _Ends:
    """The pipes of the trusted side's "end" messages: one in, one for the answers."""

    requests: int
    replies: int


def _end_session(ends: _Ends, savers: list[_Spare]) -> None:
    """Kill and reap the savers of the session named in the next "end" message, then answer.

    The trusted side's `Session.close` waits for the answer before the session's uid may go
    to another session: a session's processes are all savers of this worker (seccomp keeps
    its children from making any of their own). The trusted side gone, the worker goes too.
    """
    try:
        header = wire.read_frame(ends.requests, _END_LIMITS).header
    except EOFError:
        os._exit(0)  # the children die with it (PR_SET_PDEATHSIG)
    session = header.get("session")
    ended = [saver for saver in savers if saver.session == session]
    for saver in ended:
        saver.dismiss()
        savers.remove(saver)
    wire.write_all(ends.replies, wire.encode_frame({"op": "ended", "session": session,
                                                     "killed": len(ended)}))  # fmt: skip


def _settle(savers: list[_Spare], ended: set[int]) -> list[_Spare]:
    """Dismiss savers that ended (pidfd in `ended`, or not alive) or are past their deadline;
    returns those killed at their deadline."""
    now, overdue = time.monotonic(), []
    for saver in list(savers):
        done = saver.pidfd in ended or _readable(saver.pidfd)
        if done or now >= saver.deadline:
            if not done:
                overdue.append(saver)
            saver.dismiss()
            savers.remove(saver)
    return overdue


def _end_idle(savers: list[_Spare]) -> bool:
    """Move savers idle for `_SAVER_IDLE_S` back to normal scheduling; whether any were."""
    now, moved = time.monotonic(), False
    for saver in savers:
        if now >= saver.idle_until:
            saver.idle_until, moved = math.inf, True
            with contextlib.suppress(ProcessLookupError):  # it ended: _settle reaps it
                _set_idle(saver.pid, False)
    return moved


def _readable(fd: int) -> bool:
    """Whether `fd` has something to read now: a pidfd whose process ended, a spare's request."""
    return bool(select.select([fd], [], [], 0)[0])


def _supervise(
    spare: _Spare,
    request: wire.RunRequest,
    savers: list[_Spare],
    ends: _Ends,
) -> tuple[dict, wire.Bytes]:
    """Collect the child's output until it is complete, the child dies, or the deadline passes.

    A child that wrote its whole result (ending in DONE) is answered for at once; it saves the
    carried variables and exits while the caller reads the result. Meanwhile the savers of
    earlier calls are reaped when they end and killed at their own deadlines. A child of the
    same session may have been waiting for such a save, so its deadline then starts again: a
    runaway save is charged to the call that made it, not to the next one.
    """
    cap = request.max_result_bytes
    data, timed_out, overflow, closed = bytearray(), False, False, False
    while not closed:
        poller = select.poll()
        poller.register(spare.result_r, select.POLLIN)
        poller.register(spare.pidfd, select.POLLIN)
        poller.register(ends.requests, select.POLLIN | select.POLLHUP)
        for saver in savers:
            poller.register(saver.pidfd, select.POLLIN)
        wake = min([spare.deadline, *(s.wake for s in savers)])
        left = wake - time.monotonic()
        events = dict(poller.poll(left * 1000)) if left > 0 else {}
        if _end_idle(savers) and not events:
            continue
        if ends.requests in events:
            _end_session(ends, savers)  # another session's: this one is still running
            continue
        if any(s.pidfd in events or time.monotonic() >= s.deadline for s in savers):
            for killed in _settle(savers, set(events)):
                if killed.session == request.session:
                    spare.deadline = time.monotonic() + request.timeout_s
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
        _kill_group(spare.pid)
        code = spare.wait()
        if not (timed_out or overflow):
            _drain(spare.result_r, data, cap, block=False)
            overflow = len(data) > cap
            # exited after its whole result (a save that failed at once): it did answer
            code = 0 if data.endswith(DONE) and not overflow else code
    if data.endswith(DONE):
        del data[-len(DONE) :]
    loaded = data[:1] == STATE_LOADED
    state_dropped = False
    if not loaded and (timed_out or code != 0):
        state_dropped = _drop_state(request.state_path)
        _drop_state(request.state_path + ".names")
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


def _kill_group(pid: int) -> None:
    for target in (-pid, pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGKILL)


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
    return {**base, "state_dropped": False, "rss_kb": _memory_kb()[1], **fields}


def _memory_kb() -> tuple[int, int]:
    """This process's virtual size and resident memory in KB (`/proc/self/statm`: one line)."""
    fd = os.open("/proc/self/statm", os.O_RDONLY)
    try:
        size, resident = os.read(fd, 256).split()[:2]
    finally:
        os.close(fd)
    return int(size) * _PAGE_KB, int(resident) * _PAGE_KB


def _build_seccomp() -> tuple[_Seccomp | None, str]:
    """Compile the deny-list to BPF once; each child then loads it with two prctls."""
    try:
        import pyseccomp as sc
    except (ImportError, RuntimeError) as exc:
        return None, f"unavailable: {exc}"
    filt = sc.SyscallFilter(sc.ALLOW)
    with contextlib.suppress(AttributeError, OSError, ValueError, RuntimeError):  # libseccomp < 2.5
        filt.set_attr(sc.Attr.CTL_OPTIMIZE, 2)  # see _Seccomp
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

    Built in the worker before the template forks, so a child's lock-down only reads it: in a
    fresh fork every first write to a page copies that page, and building it there cost ~0.25
    ms on the development VM. The rules are sorted into a binary tree (libseccomp's
    CTL_OPTIMIZE=2): loading it is on every call's clock, and the kernel, which runs the program
    once per syscall number to cache the answers that do not depend on arguments, took 0.29 ms
    for the linear list against 0.21 ms for the tree (130 instructions instead of 107).
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


def _child(ctrl_r: int, result_w: int, worker: int, seccomp: _Seccomp | None) -> None:
    """The spare's life: warm up, wait for a request, lock down, run the code, report. Never
    returns. It has the template's scheduling: the warm-up of an idle spare never slows the call
    running meanwhile, and the worker moves it to normal scheduling when it hands over a
    request (it never moves itself: that would race with the worker)."""
    try:
        _detach(ctrl_r, result_w)
        # The rehearsal first: a request cuts the heap's pre-faulting short but must wait for
        # the end of a rehearsal under way (back to back, 0.7-0.9 ms instead of 2.1-2.9 ms
        # for the calls that found their spare still warming up, a third of them)
        if not _readable(ctrl_r):
            with contextlib.suppress(Exception):  # it only saves time (tested on its own)
                episode.rehearse(_CODE_DIR)  # page copies now, not on the call's clock
        _prefault_heap(_PREFAULT_BYTES, ctrl_r)
        request = wire.read_request(ctrl_r)
        os.close(ctrl_r)
        # the worker is our parent (`_fork_sibling`): die with it; if it died already, stop
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != worker:
            os._exit(0)
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
        # The worker, just woken by the result, is often placed on this core (a pipe write
        # hints that the writer will sleep): let it relay first, not after the save's time slice
        # (up to 3 ms in 1 call of 10 before).
        os.sched_yield()
        if request.carry:  # after the result is out, while the caller reads it
            episode.save_state(ep)
    except BaseException:
        os._exit(70)
    os._exit(0)


def _set_idle(pid: int, idle: bool) -> None:
    """SCHED_IDLE (runs only on a core nothing else wants) or back to normal (SCHED_OTHER)."""
    os.sched_setscheduler(pid, os.SCHED_IDLE if idle else os.SCHED_OTHER, os.sched_param(0))


def _can_wake_idle() -> bool:
    """Whether this process may move a process from SCHED_IDLE back to normal scheduling: it
    needs CAP_SYS_NICE (as root, bwrap keeps it; in a user namespace it does not count).
    Tried on a thread of its own (the policy is per thread), so the worker's is untouched."""
    woke: list[bool] = []

    def attempt() -> None:
        with contextlib.suppress(OSError):
            _set_idle(0, True)
            _set_idle(0, False)
            woke.append(True)

    thread = threading.Thread(target=attempt)
    thread.start()
    thread.join()
    return bool(woke)


def _prefault_heap(size: int, request_fd: int) -> None:
    """Fault in `size` bytes of malloc heap while the spare waits, and keep them for the call.

    A freshly forked child pays a page fault (about 1.5 us per 4 KB page here) for every page
    its code first writes: a crop, a resize and the returned copy cost about 2 ms of faults. The
    spare reserves `_HEAP_BYTES` of heap backed by transparent huge pages (a malloc'd block,
    advised MADV_HUGEPAGE and freed; with trimming and mmap for blocks under 32 MB turned off,
    numpy's and Pillow's allocations then reuse it), and faults in its first `size` bytes
    (`_populate`, 1 fault per 2 MB). A call that needs more takes the rest 2 MB per fault, ~0.1
    ms each, on its own clock. Faulting in the whole reservation zeroed 30 MB per call on the
    core that also runs the previous call's save and the next spare's warm-up: back to back on
    2 cores 1.41-1.49x of in-process against 1.36-1.43x, 90-91 against 95-98 calls/s; a call
    cropping 23.5 MB ran as fast either way. RLIMIT_AS is set after this, on top of the
    child's size (the reservation included), so the code may use its memory budget plus the
    reservation's free part. It stops early, 2 MB at a time, once a request is waiting on
    `request_fd`: a short call must not wait for it. glibc only.
    """
    if not hasattr(_libc, "mallopt"):
        return
    _libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
    _libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30)
    block = _libc.malloc(_HEAP_BYTES)
    if not block:
        return
    first = -(-block // _HUGE_PAGE) * _HUGE_PAGE
    huge = (block + _HEAP_BYTES - first) // _HUGE_PAGE * _HUGE_PAGE
    if huge > 0:
        _libc.madvise(ctypes.c_void_p(first), ctypes.c_size_t(huge), _MADV_HUGEPAGE)
    populate = True
    for start in range(0, size, _HUGE_PAGE):
        if _readable(request_fd):
            break
        length = min(_HUGE_PAGE, size - start)
        populate = populate and _populate(block + start, length)
        if not populate:
            ctypes.memset(block + start, 0, length)
    _libc.free(ctypes.c_void_p(block))


def _populate(address: int, length: int) -> bool:
    """Fault in the pages of `address`..+`length` for writing, in the kernel (Linux 5.14+).

    `memset` over the block wrote every byte twice (the kernel zeroes each new page, then
    memset writes it again) and so flushed the core's cache twice: the spare's warm-up took
    3.7-4.7 ms for 24 MB where this takes 2.6-3.3 ms. False where the kernel does not know
    MADV_POPULATE_WRITE.
    """
    page = address & -_PAGE_SIZE
    size = ctypes.c_size_t(address + length - page)
    return _libc.madvise(ctypes.c_void_p(page), size, _MADV_POPULATE_WRITE) == 0


def _detach(*keep: int) -> None:
    """Own process group, no inherited descriptors but `keep`."""
    os.setpgid(0, 0)
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
