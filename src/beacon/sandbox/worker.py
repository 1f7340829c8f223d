"""The pre-forked sandbox worker: runs inside the jail, forks one locked-down child per call.

Started by `beacon.sandbox.pool` as `python -E -s worker.py` from the sandbox's `_code/` folder
(copies of this file, `episode.py`, `wire.py` and `repair.py`), so it imports nothing from
`beacon`. It speaks the wire format on the descriptors it was started with and, for each "run"
request:

1. decodes the session's input images once into huge-page (or file-backed) memory, cheap to
   fork and to read, and caches them per session;
2. hands the request to a *spare* child forked ahead of time, which detaches (own process group,
   no inherited descriptors) and pre-faults a heap while it waits, then applies rlimits, drops
   to the session's uid, loads the seccomp deny-list, and runs `episode` (carried variables,
   the code, the images);
3. forks the next spare while the code runs, reads the child's result from a pipe until it is
   complete, the child dies, or the wall-clock deadline passes (then SIGKILL to the child's
   process group), and relays the bytes, capped in size and never parsed here, to the trusted
   side. The answered child then saves its carried variables, bounded by the same deadline,
   while the next call may already run (episode.py orders a session's saves and loads).

The child writes one marker byte once carried variables are restored; a child that dies or times
out before that has the state file deleted, so a poisoned pickle cannot wedge a session.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import dataclasses
import errno
import fcntl
import functools
import gc
import math
import mmap
import os
import resource
import select
import shutil
import signal
import time
import traceback
from collections.abc import Callable
from typing import Any

import episode
import wire
from PIL import Image

STATE_LOADED = b"\x01"
SETUP_FAILED = b"\x02"
DONE = b"\x00BEACON-RESULT-COMPLETE"
_MAX_REQUEST_BYTES = 64 << 20
_F_SETPIPE_SZ = 1031
_CLONE_THREAD = 0x00010000
_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_libc = ctypes.CDLL(None, use_errno=True)
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = (ctypes.c_size_t,)
_M_TRIM_THRESHOLD = -1  # mallopt parameters (glibc malloc.h)
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 32 << 20  # glibc's largest; smaller blocks come from the pre-faulted heap
_PREFAULT_BYTES = 24 << 20  # a 1200x900 crop, its resize and the returned copy fit easily
_HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = 14
_FORK_DURING_S = 0.005  # a call running longer gets the next spare forked while it runs
_DENIED_SYSCALLS = (
    # network
    "socket", "socketpair",
    # new programs and processes (threads stay allowed, see _load_seccomp)
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
    # identity
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups",
    "setfsuid", "setfsgid", "capset",
)  # fmt: skip


def main() -> None:
    """Serve requests until the trusted side closes the pipe or sends "exit"."""
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # stray prints from libraries must not corrupt the protocol
    seccomp_filter, seccomp_note = _build_seccomp()
    cache: collections.OrderedDict[str, _Inputs] = collections.OrderedDict()
    limits = wire.FrameLimits(max_header_bytes=_MAX_REQUEST_BYTES, max_blobs=0, max_total_bytes=0)
    ready = {"op": "ready", "pid": os.getpid(), "euid": os.geteuid(), "seccomp": seccomp_note}
    gc.freeze()  # keep the collector from dirtying inherited pages in every child
    spare = _Spare.fork(cache, seccomp_filter)
    saving: _Spare | None = None  # the last answered child, maybe still saving its variables
    wire.write_all(proto_out, wire.encode_frame(ready))
    while True:
        try:
            request = wire.read_frame(proto_in, limits).header
        except EOFError:
            request = {"op": "exit"}
        if request.get("op") == "exit":
            for child in (saving, spare):
                if child is not None:
                    child.dismiss()
            return
        wire.write_all(proto_out, wire.encode_frame({"op": "accepted"}))
        for session in request.get("drop", []):
            cache.pop(session, None)
        try:
            _session_images(request, cache)
        except Exception as exc:
            error = f"cannot load the input images: {type(exc).__name__}: {exc}"
            wire.write_all(proto_out, wire.encode_frame(_reply(error=error), [b""]))
            continue
        if request["session"] not in spare.sessions:
            spare.dismiss()
            spare = _Spare.fork(cache, seccomp_filter)
        running = spare
        running.start(request)
        # The next spare is forked while this code runs on the other core if it runs long
        # enough, else after the reply. The previous child may still be saving its variables:
        # a child of the same session waits for that save itself, if and when it needs it.
        fork_next = functools.partial(_Spare.fork, cache, seccomp_filter)
        header, payload, spare = _supervise(running, request, saving, fork_next)
        # cached images in huge pages count in VmRSS but are bounded by cached_sessions
        header["rss_kb"] = max(header["rss_kb"] - sum(i.kb for i in cache.values()), 0)
        wire.write_frame(proto_out, header, [payload])
        if spare is None:
            spare = fork_next()
        if saving is not None:
            saving.settle()
        running.session = request["session"]
        saving = running


class _Spare:
    """A child forked ahead of the next request, waiting on a pipe for its code.

    Forking and tearing down a process that holds numpy, OpenCV and matplotlib costs several
    milliseconds; doing it between calls keeps it off the caller's clock. The spare has not
    dropped privileges yet, but it runs only this file's code until a request arrives.
    """

    def __init__(self, pid: int, ctrl_w: int, result_r: int, sessions: frozenset[str]) -> None:
        self.pid, self.ctrl_w, self.result_r, self.sessions = pid, ctrl_w, result_r, sessions
        self.pidfd = os.pidfd_open(pid)
        self.reaped = False
        self.deadline = math.inf
        self.session = ""  # set once it has answered a request

    @classmethod
    def fork(cls, cache: dict, seccomp_filter: bytes | None) -> _Spare:
        ctrl_r, ctrl_w = os.pipe()
        result_r, result_w = os.pipe()
        with contextlib.suppress(OSError):
            fcntl.fcntl(result_w, _F_SETPIPE_SZ, 1 << 20)  # fewer wake-ups for image bytes
        pid = os.fork()
        if pid == 0:
            os.close(ctrl_w)
            os.close(result_r)
            _child(ctrl_r, result_w, cache, seccomp_filter)
        os.close(ctrl_r)
        os.close(result_w)
        return cls(pid, ctrl_w, result_r, frozenset(cache))

    def start(self, request: dict[str, Any]) -> None:
        """Hand the request over; the call's wall-clock deadline starts now."""
        self.deadline = time.monotonic() + request["timeout_s"]
        with contextlib.suppress(OSError):  # a dead spare is reported by _supervise
            wire.write_all(self.ctrl_w, wire.encode_frame(request))
        os.close(self.ctrl_w)
        self.ctrl_w = -1

    def wait(self) -> int:
        """Reap the child and return its exit code (negative: killed by that signal)."""
        _, status = os.waitpid(self.pid, 0)
        self.reaped = True
        return os.waitstatus_to_exitcode(status)

    def settle(self) -> None:
        """Let an answered child save its variables until the call's deadline, then reap it.

        One killed first leaves the session its previous state file; the session's next call
        notices and says so (see episode.py).
        """
        left = self.deadline - time.monotonic()
        if not self.reaped and left > 0:
            select.select([self.pidfd], [], [], left)
        self.dismiss()

    def dismiss(self) -> None:
        """Kill (if still running), reap and close; safe to call twice."""
        if not self.reaped:
            _kill_group(self.pid)
            self.wait()
        for fd in (self.ctrl_w, self.result_r, self.pidfd):
            if fd >= 0:
                os.close(fd)
        self.ctrl_w = self.result_r = self.pidfd = -1


@dataclasses.dataclass
class _Inputs:
    """A session's decoded input images, as cached by the worker."""

    images: list[Image.Image]
    kb: int  # of them in the worker's anonymous memory (huge pages), so in its VmRSS


def _session_images(request: dict[str, Any], cache: dict[str, _Inputs]) -> _Inputs:
    """Decoded input images of a session, decoded once per worker and kept in an LRU cache."""
    session = request["session"]
    if session in cache:
        cache.move_to_end(session)
        return cache[session]
    Image.MAX_IMAGE_PIXELS = request["max_input_pixels"]
    inputs = _Inputs([], 0)
    for path in request["inputs"]:
        with Image.open(path) as img:
            img.load()
            forkable, anon_bytes = _forkable(img.convert("RGB") if img.mode != "RGB" else img)
        inputs.images.append(forkable)
        inputs.kb += anon_bytes // 1024
    cache[session] = inputs
    while len(cache) > request["cached_sessions"]:
        cache.popitem(last=False)
    return inputs


def _forkable(img: Image.Image) -> tuple[Image.Image, int]:
    """An RGB image whose pixels are cheap to fork and cheap for the child to read.

    fork() copies the page tables of anonymous memory in 4 KB pages (about 1 ms per 10 MB
    here), but only one entry per 2 MB huge page, and none for file mappings. Huge-page memory
    is best: the child reads it without a single page fault (a crop of a 4000x3000 image runs
    1 ms faster than from a file mapping, which the child must fault in 64 KB at a time). Where
    the kernel gives no huge pages, the pixels go to a memfd mapping instead. Either way the
    mapping is private: a child that draws on `image` gets copy-on-write pages the worker never
    sees. Pillow stores RGB as 4 bytes per pixel, so RGBX bytes are its exact memory layout.
    Returns the image and the bytes of anonymous memory it holds.
    """
    raw = img.tobytes("raw", "RGBX")
    huge = _huge_page_copy(raw)
    buf, offset = huge or (_file_copy(raw), 0)
    core = Image.core.map_buffer(buf, img.size, "raw", offset, ("RGB", img.width * 4, 1))
    return Image.new("RGB", (0, 0))._new(core), len(buf) if huge else 0


def _huge_page_copy(raw: bytes) -> tuple[mmap.mmap, int] | None:
    """`raw` at an offset of anonymous memory made of transparent huge pages, or None if the
    kernel did not back all of it with huge pages (THP off, or memory too fragmented)."""
    size = -(-len(raw) // _HUGE_PAGE) * _HUGE_PAGE
    buf = mmap.mmap(-1, size + _HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    offset = -address % _HUGE_PAGE  # huge pages need 2 MB alignment
    try:
        buf.madvise(mmap.MADV_HUGEPAGE)
        buf[offset : offset + len(raw)] = raw
        if _anon_huge_kb(address) * 1024 >= size:
            return buf, offset
    except OSError:
        pass
    buf.close()
    return None


def _anon_huge_kb(address: int) -> int:
    """AnonHugePages of the mapping that starts at `address`, from /proc/self/smaps."""
    start = f"{address:x}-"
    found = False
    with open("/proc/self/smaps") as f:
        for line in f:
            if line.startswith(start):
                found = True
            elif found and line.startswith("AnonHugePages:"):
                return int(line.split()[1])
    return 0


def _file_copy(raw: bytes) -> mmap.mmap:
    """`raw` in a private mapping of a memfd (fork() does not copy its page tables)."""
    fd = os.memfd_create("beacon-image", os.MFD_CLOEXEC)
    try:
        with open(fd, "wb", closefd=False) as f:
            f.write(raw)
        return mmap.mmap(fd, len(raw), flags=mmap.MAP_PRIVATE)
    finally:
        os.close(fd)


def _supervise(
    spare: _Spare,
    request: dict[str, Any],
    saving: _Spare | None,
    fork_next: Callable[[], _Spare],
) -> tuple[dict, wire.Bytes, _Spare | None]:
    """Collect the child's output until it is complete, the child dies, or the deadline passes.

    A child that wrote its whole result (ending in DONE) is answered for at once; it saves the
    carried variables and exits while the caller reads the result (see `_Spare.settle`).
    Meanwhile `saving`, the previous call's child, may still be saving: it is reaped when it
    ends and killed at its own deadline. A child of the same session may have been waiting for
    that save, so its deadline then starts again: a runaway save does not cost the next call.
    A call still running after _FORK_DURING_S gets the next spare forked meanwhile (returned
    too; forking takes the worker about 2 ms, which a shorter call would wait for).
    """
    next_spare, fork_at = None, time.monotonic() + _FORK_DURING_S
    deadline = spare.deadline
    cap = request["max_result_bytes"]
    data, timed_out, overflow, closed = bytearray(), False, False, False
    poller = select.poll()
    poller.register(spare.result_r, select.POLLIN)
    poller.register(spare.pidfd, select.POLLIN)
    watching = saving is not None and not saving.reaped
    if watching:
        poller.register(saving.pidfd, select.POLLIN)
    while not closed:
        wake = min(deadline, saving.deadline) if watching else deadline
        wake = min(wake, fork_at) if next_spare is None else wake
        left = wake - time.monotonic()
        events = dict(poller.poll(left * 1000)) if left > 0 else {}
        if watching and (saving.pidfd in events or time.monotonic() >= saving.deadline):
            poller.unregister(saving.pidfd)
            watching = False
            if saving.pidfd not in events and saving.session == request["session"]:
                deadline = spare.deadline = time.monotonic() + request["timeout_s"]
            saving.dismiss()
            continue
        if not events and next_spare is None and time.monotonic() >= fork_at:
            next_spare = fork_next()
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
    if not complete:
        _kill_group(spare.pid)
    code = 0 if complete else spare.wait()
    if not (timed_out or overflow or complete):
        _drain(spare.result_r, data, cap, block=False)
        overflow = len(data) > cap
    if data.endswith(DONE):
        del data[-len(DONE) :]
    loaded = data[:1] == STATE_LOADED
    state_dropped = False
    if not loaded and (timed_out or code != 0):
        state_dropped = _drop_state(request["state_path"])
        _drop_state(request["state_path"] + ".names")
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
        next_spare,
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
    try:
        os.unlink(path)
    except IsADirectoryError:
        shutil.rmtree(path, ignore_errors=True)
    except OSError:
        return False
    return True


def _reply(**fields: Any) -> dict[str, Any]:
    base = {"op": "result", "exit_code": None, "timed_out": False, "overflow": False}
    return {**base, "state_dropped": False, "rss_kb": _status_kb("VmRSS"), **fields}


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _build_seccomp() -> tuple[bytes | None, str]:
    """Compile the deny-list to BPF once; each child then loads it with one prctl."""
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
        return f.read(), "deny-list"


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def _load_seccomp(program: bytes) -> None:
    """Install the BPF program (8 bytes per instruction) after PR_SET_NO_NEW_PRIVS."""
    code = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(code))
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")


def _child(ctrl_r: int, result_w: int, cache: dict, seccomp_filter: bytes | None) -> None:
    """The spare's life: wait for a request, lock down, run the code, report. Never returns."""
    try:
        _detach(ctrl_r, result_w)
        _prefault_heap(_PREFAULT_BYTES, ctrl_r)
        limits = wire.FrameLimits(_MAX_REQUEST_BYTES, max_blobs=0, max_total_bytes=0)
        request = wire.read_frame(ctrl_r, limits).header
        os.close(ctrl_r)
        images = cache[request["session"]].images
        _lock_down(request, seccomp_filter)
    except EOFError:
        os._exit(0)  # dismissed without a request
    except BaseException:
        wire.write_all(result_w, SETUP_FAILED + traceback.format_exc()[-1500:].encode())
        os._exit(70)
    try:
        ep = episode.prepare(request, images)
        wire.write_all(result_w, STATE_LOADED)
        for part in episode.execute(ep):
            wire.write_all(result_w, part)
        wire.write_all(result_w, DONE)
        os.close(result_w)
        if request["carry"]:  # after the result is out, while the caller reads it
            episode.save_state(ep)
    except BaseException:
        os._exit(70)
    os._exit(0)


def _prefault_heap(size: int, request_fd: int) -> None:
    """Fault in `size` bytes of malloc heap while the spare waits, and keep them for the call.

    A freshly forked child pays a page fault (about 1.5 us per 4 KB page here) for every page
    its code first writes: a crop, a resize and the returned copy cost about 2 ms of faults. The
    spare, idle until its request comes, touches a heap block backed by transparent huge pages
    (1 fault per 2 MB) and frees it; with trimming and mmap for blocks under 32 MB turned off,
    numpy's and Pillow's allocations then reuse those pages. RLIMIT_AS is set after this, on
    top of the child's size, so the code's memory budget is unchanged. It stops early, 2 MB
    at a time, once a request is waiting on `request_fd`: a short call must not wait for it.
    glibc only.
    """
    if not hasattr(_libc, "mallopt"):
        return
    _libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
    _libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30)
    block = _libc.malloc(size)
    if not block:
        return
    first = -(-block // _HUGE_PAGE) * _HUGE_PAGE
    huge = (block + size - first) // _HUGE_PAGE * _HUGE_PAGE
    if huge > 0:
        _libc.madvise(ctypes.c_void_p(first), ctypes.c_size_t(huge), _MADV_HUGEPAGE)
    poller = select.poll()
    poller.register(request_fd, select.POLLIN)
    for start in range(0, size, _HUGE_PAGE):
        if poller.poll(0):
            break
        ctypes.memset(block + start, 0, min(_HUGE_PAGE, size - start))
    _libc.free(ctypes.c_void_p(block))


def _detach(*keep: int) -> None:
    """Own process group, no inherited descriptors but `keep`, death with the worker."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
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


def _lock_down(request: dict, seccomp_filter: bytes | None) -> None:
    """rlimits, the session's folder and uid, then the seccomp filter (last: it denies setuid)."""
    cpu = math.ceil(request["cpu_s"])
    limits = {
        resource.RLIMIT_AS: _status_kb("VmSize") * 1024 + request["memory_bytes"],
        resource.RLIMIT_CPU: cpu,
        resource.RLIMIT_FSIZE: request["max_file_bytes"],
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_NPROC: request["max_processes"],
        resource.RLIMIT_NOFILE: 256,
    }
    for which, value in limits.items():
        hard = value + 1 if which == resource.RLIMIT_CPU else value
        resource.setrlimit(which, (value, hard))
    os.chdir(request["out_dir"])
    os.umask(0o077)
    uid = request["uid"]
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    if seccomp_filter is not None:
        _load_seccomp(seccomp_filter)


if __name__ == "__main__":
    main()
