"""The pre-forked sandbox worker: runs inside the jail, forks one locked-down child per call.

Started by `beacon.sandbox.pool` as `python -E -s worker.py` from the sandbox's `_code/` folder
(copies of this file, `episode.py`, `wire.py` and `repair.py`), so it imports nothing from
`beacon`. It speaks the wire format on the descriptors it was started with and, for each "run"
request:

1. decodes the session's input images once into file-backed memory (cheap to fork) and caches
   them per session;
2. hands the request to a *spare* child forked ahead of time, which detaches (own process group,
   no inherited descriptors), applies rlimits, drops to the session's uid, loads the seccomp
   deny-list, and then runs `episode` (carried variables, the code, the images);
3. reads the child's result from a pipe until it is complete, the child dies, or the wall-clock
   deadline passes (then SIGKILL to the child's process group), and relays the bytes, capped in
   size and never parsed here, to the trusted side; then forks the next spare while the
   finished child saves the carried variables (bounded by the same deadline).

The child writes one marker byte once carried variables are restored; a child that dies or times
out before that has the state file deleted, so a poisoned pickle cannot wedge a session.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import errno
import fcntl
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
    cache: collections.OrderedDict[str, list[Image.Image]] = collections.OrderedDict()
    limits = wire.FrameLimits(max_header_bytes=_MAX_REQUEST_BYTES, max_blobs=0, max_total_bytes=0)
    ready = {"op": "ready", "pid": os.getpid(), "euid": os.geteuid(), "seccomp": seccomp_note}
    gc.freeze()  # keep the collector from dirtying inherited pages in every child
    spare = _Spare.fork(cache, seccomp_filter)
    saving: _Spare | None = None  # the last answered child, maybe still saving its variables
    unsaved: set[str] = set()  # sessions whose last child was killed while saving
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
        if saving is not None and saving.session == request["session"]:
            _settle(saving, unsaved)  # this call must see the variables that one saves
            saving = None
        if request["session"] not in spare.sessions:
            spare.dismiss()
            spare = _Spare.fork(cache, seccomp_filter)
        if request["session"] in unsaved:
            unsaved.discard(request["session"])
            request["notes"] = ["variables from the previous call were not carried over"]
        header, payload = spare.run(request)
        wire.write_all(proto_out, wire.encode_frame(header, [payload]))
        if saving is not None:
            _settle(saving, unsaved)
        # The answered child saves its variables while the next one is forked, both off the
        # caller's clock; only a request of the same session waits for the save.
        spare.session = request["session"]
        spare.answered_ok = header["exit_code"] == 0 and bool(request["carry"])
        saving, spare = spare, _Spare.fork(cache, seccomp_filter)


def _settle(child: _Spare, unsaved: set[str]) -> None:
    """Wait for an answered child to save its variables (until its deadline), then reap it."""
    if not child.finish() and child.answered_ok:
        unsaved.add(child.session)
    child.dismiss()


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
        self.answered_ok = False  # ran to completion with carried variables to save

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

    def run(self, request: dict[str, Any]) -> tuple[dict, bytes]:
        with contextlib.suppress(OSError):  # a dead spare is reported by _supervise
            wire.write_all(self.ctrl_w, wire.encode_frame(request))
        os.close(self.ctrl_w)
        self.ctrl_w = -1
        return _supervise(self, request)

    def wait(self) -> int:
        """Reap the child and return its exit code (negative: killed by that signal)."""
        _, status = os.waitpid(self.pid, 0)
        self.reaped = True
        return os.waitstatus_to_exitcode(status)

    def finish(self) -> bool:
        """Let an answered child save its variables until the call's deadline; False if it
        had to be killed first (the session then keeps the previous call's variables)."""
        if self.reaped:
            return True
        left = self.deadline - time.monotonic()
        done = bool(left > 0 and select.select([self.pidfd], [], [], left)[0])
        _kill_group(self.pid)
        return done and self.wait() == 0

    def dismiss(self) -> None:
        _kill_group(self.pid)
        if not self.reaped:
            self.wait()
        for fd in (self.ctrl_w, self.result_r, self.pidfd):
            if fd >= 0:
                os.close(fd)


def _session_images(request: dict[str, Any], cache: dict) -> list[Image.Image]:
    """Decoded input images of a session, decoded once per worker and kept in an LRU cache."""
    session = request["session"]
    if session in cache:
        cache.move_to_end(session)
        return cache[session]
    Image.MAX_IMAGE_PIXELS = request["max_input_pixels"]
    images = []
    for path in request["inputs"]:
        with Image.open(path) as img:
            img.load()
            images.append(_file_backed(img.convert("RGB") if img.mode != "RGB" else img))
    cache[session] = images
    while len(cache) > request["cached_sessions"]:
        cache.popitem(last=False)
    return images


def _file_backed(img: Image.Image) -> Image.Image:
    """An RGB image whose pixels live in a private mapping of a memfd.

    fork() copies the page tables of anonymous memory (about 1 ms per 10 MB here) but not of
    file mappings, so a 4000x3000 image costs the child nothing until it reads it, and a
    child that draws on `image` gets copy-on-write pages the worker never sees. Pillow stores
    RGB as 4 bytes per pixel, so RGBX bytes are its exact memory layout.
    """
    raw = img.tobytes("raw", "RGBX")
    fd = os.memfd_create("beacon-image", os.MFD_CLOEXEC)
    try:
        with open(fd, "wb", closefd=False) as f:
            f.write(raw)
        buf = mmap.mmap(fd, len(raw), flags=mmap.MAP_PRIVATE)
    finally:
        os.close(fd)
    core = Image.core.map_buffer(buf, img.size, "raw", 0, ("RGB", img.width * 4, 1))
    return Image.new("RGB", (0, 0))._new(core)


def _supervise(spare: _Spare, request: dict[str, Any]) -> tuple[dict, bytes]:
    """Collect the child's output until it is complete, the child dies, or the deadline passes.

    A child that wrote its whole result (ending in DONE) is answered for at once; it saves the
    carried variables and exits while the caller reads the result (see `_Spare.finish`).
    """
    deadline = spare.deadline = time.monotonic() + request["timeout_s"]
    cap = request["max_result_bytes"]
    data, timed_out, overflow, closed = bytearray(), False, False, False
    poller = select.poll()
    poller.register(spare.result_r, select.POLLIN)
    poller.register(spare.pidfd, select.POLLIN)
    while not closed:
        left = deadline - time.monotonic()
        events = poller.poll(max(left, 0) * 1000) if left > 0 else []
        if not events:
            timed_out = True
            break
        if any(fd == spare.pidfd for fd, _ in events):
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
    setup_error = None
    if data[:1] == SETUP_FAILED:
        setup_error = bytes(data[1:2000]).decode("utf-8", "replace")
    payload = b"" if overflow or not loaded else bytes(data[1:])
    return _reply(
        exit_code=code,
        timed_out=timed_out,
        overflow=overflow,
        state_dropped=state_dropped,
        setup_error=setup_error,
    ), payload


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
        limits = wire.FrameLimits(_MAX_REQUEST_BYTES, max_blobs=0, max_total_bytes=0)
        request = wire.read_frame(ctrl_r, limits).header
        os.close(ctrl_r)
        images = cache[request["session"]]
        _lock_down(request, seccomp_filter)
    except EOFError:
        os._exit(0)  # dismissed without a request
    except BaseException:
        wire.write_all(result_w, SETUP_FAILED + traceback.format_exc()[-1500:].encode())
        os._exit(70)
    try:
        ep = episode.prepare(request, images)
        wire.write_all(result_w, STATE_LOADED)
        wire.write_all(result_w, episode.execute(ep) + DONE)
        os.close(result_w)
        if request["carry"]:  # after the result is out, while the caller reads it
            episode.save_state(ep)
    except BaseException:
        os._exit(70)
    os._exit(0)


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
