"""Session folders on the host: private to one session, size- and inode-limited, and removed
off the caller's thread; session uids that are never reused while anything of their session
exists; roots left behind by a killed sandbox removed at the next start.

When the trusted process runs as root, the sandbox's root folder is a tmpfs mount made *shared*
before the workers start, and every session's folder is its own tmpfs mount under it
(`size=`, `nr_inodes=`): the mounts propagate into the workers' jails (bwrap binds the root
as a slave of it), the kernel enforces the quota at every write, and removing a session is an
unmount, however many files or nested folders its code made. Without root (or where mounting
fails) folders are plain directories, without a quota, removed with `rm -rf`.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import queue
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from beacon.sandbox.config import SandboxError

logger = logging.getLogger(__name__)

OWNER_FILE = "_owner"  # "<pid> <start time>" of the process that owns a sandbox root
ROOT_PREFIX = "beacon-sandbox-"
_MS_NOSUID, _MS_NODEV, _MS_SHARED = 2, 4, 1 << 20
_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


def mount_tmpfs(path: str, options: str) -> None:
    """Mount a fresh tmpfs at `path` (nosuid, nodev); OSError if the kernel refuses."""
    flags = _MS_NOSUID | _MS_NODEV
    if _libc.mount(b"tmpfs", path.encode(), b"tmpfs", flags, options.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs on {path} ({options}): {os.strerror(err)}")


def make_shared_root(root: str) -> bool:
    """Mount a tmpfs at `root` and make it shared, so that session mounts made under it later
    appear in the jails; False (and nothing mounted) where this process may not mount."""
    if os.geteuid() != 0:
        return False
    try:
        mount_tmpfs(root, "mode=0711")
    except OSError as exc:
        logger.warning("sandbox sessions get no disk quota: %s", exc)
        return False
    if _libc.mount(None, root.encode(), None, _MS_SHARED, None) != 0:
        logger.warning("sandbox sessions get no disk quota: cannot make %s shared", root)
        _libc.umount2(root.encode(), _MNT_DETACH)
        return False
    return True


def remove_tree(path: str) -> None:
    """Unmount every mount at or under `path`, then delete what is left.

    Neither step recurses in Python: 3 000 nested folders or 500 000 files cost no stack, and
    an unmounted tmpfs frees its files at once. A session's folder is its own tmpfs: detached
    with whatever is mounted below it, it is then an empty folder, and the mount table (which
    grows with every open session) need not be read.
    """
    if _libc.umount2(path.encode(), _MNT_DETACH) != 0:  # not a mount point itself
        for mount_point in sorted(_mounts_under(path), key=len, reverse=True):
            _libc.umount2(mount_point.encode(), _MNT_DETACH)
    try:
        os.rmdir(path)  # an unmounted session folder is empty
    except FileNotFoundError:
        return
    except OSError:
        subprocess.run(["rm", "-rf", "--", path], check=False, capture_output=True)


def _mounts_under(path: str) -> list[str]:
    prefix = path.rstrip("/") + "/"
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    points = [line.split()[4] for line in lines if len(line.split()) > 4]
    return [p for p in points if p == path or p.startswith(prefix)]


def kill_uid(uid: int) -> int:
    """SIGKILL every process whose real uid is `uid` (a session's savers); returns how many.

    Each process is addressed through a pidfd taken before its uid is checked, so a reused
    pid is never hit.
    """
    killed = 0
    for entry in os.scandir("/proc"):
        # A first read skips the other uids' processes without a pidfd (half the syscalls).
        if not entry.name.isdigit() or _real_uid(entry.path) != uid:
            continue
        try:
            pidfd = os.pidfd_open(int(entry.name))
        except OSError:
            continue
        try:
            if _real_uid(entry.path) == uid:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                killed += 1
        except OSError:
            pass
        finally:
            os.close(pidfd)
    return killed


def _real_uid(proc_dir: str) -> int | None:
    """The real uid from `/proc/PID/status` (None if the process is gone)."""
    try:
        fd = os.open(os.path.join(proc_dir, "status"), os.O_RDONLY)
    except OSError:
        return None
    try:
        status = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    start = status.find(b"\nUid:")
    return int(status[start + 5 :].split(None, 1)[0]) if start >= 0 else None


class UidPool:
    """Session uids, each held from the session's start until its folder is gone and its
    processes are dead, so that no session ever gets the uid of one whose files still exist."""

    def __init__(self, base: int, count: int) -> None:
        self.base, self.count = base, count
        self._used: set[int] = set()
        self._next = 0
        self._lock = threading.Lock()

    def allocate(self) -> int:
        with self._lock:
            if len(self._used) >= self.count:
                raise SandboxError(
                    f"all {self.count} session uids are in use: close sessions before opening "
                    "more (each open session, and each closed one until its folder is removed, "
                    "holds its own uid)"
                )
            while self._next in self._used:
                self._next = (self._next + 1) % self.count
            offset = self._next
            self._used.add(offset)
            self._next = (offset + 1) % self.count
            return self.base + offset

    def release(self, uid: int) -> None:
        with self._lock:
            self._used.discard(uid - self.base)


class Cleaner:
    """One background thread that removes closed sessions' folders, in order.

    `close()` runs what is queued and stops the thread; jobs submitted after that run at once,
    in the caller's thread.
    """

    def __init__(self) -> None:
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._thread = threading.Thread(
            target=self._run, name="beacon-sandbox-cleaner", daemon=True
        )
        self._closed = False
        self._thread.start()

    def submit(self, job: Callable[[], None]) -> None:
        if self._closed:
            job()
        else:
            self._jobs.put(job)

    def wait(self) -> None:
        """Block until every job submitted so far has run."""
        self._jobs.join()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._jobs.put(None)
            self._thread.join()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except Exception:  # a failed cleanup must not stop the others
                logger.exception("sandbox cleanup failed")
            finally:
                self._jobs.task_done()


def write_owner(root: str) -> None:
    """Record this process as the root's owner, for `remove_stale_roots`."""
    path = os.path.join(root, OWNER_FILE)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(f"{os.getpid()} {_start_time(os.getpid())}")


def stale_roots(parent: str) -> list[str]:
    """Sandbox roots in `parent` whose owning process is gone (killed before its cleanup)."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            if entry.name.startswith(ROOT_PREFIX) and entry.is_dir(follow_symlinks=False):
                owner = _read_owner(os.path.join(entry.path, OWNER_FILE))
                if owner is not None and _start_time(owner[0]) != owner[1]:
                    found.append(entry.path)
    return found


def _read_owner(path: str) -> tuple[int, str] | None:
    try:
        pid, start = Path(path).read_text().split()
        return int(pid), start
    except (OSError, ValueError):
        return None  # not ours, or still being created: left alone


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot ("" if there is no such process)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""
