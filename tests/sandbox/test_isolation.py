"""No session observes another: one two-session test per leak channel, and the neighbour cases.

Each leak test opens session A, leaves something of it behind (pixels, code, output, files, a
SysV segment), then runs code in session B *on the same worker* that tries exactly the read that
worked before the fix (issue 9). All of them failed on the code before it.
"""

from __future__ import annotations

import itertools
import os
import secrets
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from beacon.sandbox import Sandbox, folders
from beacon.sandbox.config import SandboxError
from beacon.sandbox.pool import Worker, WorkerDied

from .helpers import assert_benign_call_works, make_image, tight_config

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="per-session uids need root")
_KEY = 0x5A

# B's code gets each needle XORed with _KEY and compares XORed memory against it, so the plain
# needle never exists in B's process except where it leaked (and in its own scan buffers).
SCAN_MEMORY = """
import ctypes
ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: the uid drop made /proc/self root's
needles = {name: bytes.fromhex(h) for name, h in ENCODED.items()}
buf, xbuf = bytearray(1 << 24), bytearray(1 << 24)
own = [ctypes.addressof((ctypes.c_char * len(b)).from_buffer(b)) for b in (buf, xbuf)]
plain, xored = np.frombuffer(buf, np.uint8), np.frombuffer(xbuf, np.uint8)
found, scanned = set(), 0
mem = open('/proc/self/mem', 'rb', buffering=0)
for line in open('/proc/self/maps').read().splitlines():
    span, perms = line.split()[:2]
    if perms[0] != 'r' or line.endswith(('[vvar]', '[vsyscall]')):
        continue
    start, end = (int(x, 16) for x in span.split('-'))
    pos = start
    while pos < end:
        try:
            mem.seek(pos)
            got = mem.readinto(memoryview(buf)[: min(end - pos, len(buf))])
        except (OSError, ValueError, OverflowError):
            break
        if not got:
            break
        np.bitwise_xor(plain[:got], KEY, out=xored[:got])
        for name, enc in needles.items():
            i = xbuf.find(enc, 0, got)
            while i >= 0:
                at = pos + i
                if not any(o <= at < o + len(buf) for o in own):
                    found.add(name)
                i = xbuf.find(enc, i + 1, got)
        scanned += got
        pos += max(got - 64, 1)
print(sorted(found), scanned > 10 << 20)
"""


def _encoded(needles: dict[str, bytes]) -> str:
    return repr({name: bytes(b ^ _KEY for b in n).hex() for name, n in needles.items()})


@pytest.fixture
def one_worker() -> Iterator[Sandbox]:
    """One worker, so both sessions of a test are served by the same process."""
    with Sandbox(tight_config(num_workers=1, timeout_s=20.0, memory_mb=1024)) as sb:
        yield sb


def test_memory_of_other_sessions_is_not_inherited(one_worker: Sandbox) -> None:
    """Before: B's child was forked from the worker that had served A, so it held A's decoded
    pixels (the worker's image cache), A's request (its code) and A's relayed result."""
    rng = np.random.default_rng(secrets.randbits(32))
    pixels_a = Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8))
    code_marker, out_marker = f"CODE-{secrets.token_hex(12)}", secrets.token_hex(12)
    a = one_worker.session(images=[pixels_a])
    r = a.run(f"note = '{code_marker}'\nprint('OUT-' + '{out_marker}')\nimage.crop((0,0,9,9))")
    assert r.ok, r.error
    needles = {
        "pixels": pixels_a.tobytes("raw", "RGBX")[64 * 4 * 10 : 64 * 4 * 10 + 48],
        "code": code_marker.encode(),
        "output": f"OUT-{out_marker}".encode(),
    }
    with one_worker.session(images=[make_image()]) as b:
        scan = f"ENCODED = {_encoded(needles)}\nKEY = {_KEY}\n" + SCAN_MEMORY
        r = b.run(scan)
    a.close()
    assert r.ok, r.error
    assert r.stdout == "[] True\n"  # nothing of A found, in more than 10 MB scanned


def test_each_call_is_the_templates_child_with_a_random_state_of_its_own(
    one_worker: Sandbox,
) -> None:
    """Every child is forked by the one template, and draws its own random numbers (forked
    from the same state, the calls would otherwise draw the same ones)."""
    seen = []
    for _ in range(3):
        with one_worker.session(images=[make_image()]) as session:
            r = session.run("import os, random\nprint(os.getppid(), random.getrandbits(64))")
        assert r.ok, r.error
        seen.append(r.stdout.split())
    assert len({parent for parent, _ in seen}) == 1
    assert len({draw for _, draw in seen}) == 3


@needs_root
def test_input_images_of_another_session_are_unreadable(one_worker: Sandbox) -> None:
    """Before: images/ was 0755 and its files 0644, so B read A's input given its path."""
    a = one_worker.session(images=[make_image()])
    with one_worker.session(images=[make_image()]) as b:
        targets = [a.host_image_paths[0], os.path.join(a.dir, "pixels", "image_0.rgbx"), a.dir]
        code = f"for p in {targets!r}:\n    try:\n        open(p, 'rb') if p.endswith(('bmp', 'rgbx')) else os.listdir(p)\n        print('PWNED', p)\n    except OSError as exc:\n        print(type(exc).__name__)"  # noqa: E501
        r = b.run(code)
    a.close()
    assert r.ok, r.error
    assert r.stdout == "PermissionError\n" * 3


def test_sysv_shared_memory_does_not_reach_another_session(one_worker: Sandbox) -> None:
    """Before: shmget was allowed and a worker's sessions shared its IPC namespace, so B read
    the segment a closed session A had left."""
    marker = secrets.token_hex(8)
    key = 0x5EC0 + secrets.randbelow(1 << 12)
    libc = "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.shmat.restype = ctypes.c_void_p\n"
    write = (
        f"{libc}shm = libc.shmget({key}, 4096, 0o1666)\nassert shm >= 0, 'shmget refused'\n"
        f"ctypes.memmove(libc.shmat(shm, None, 0), b'{marker}', 16)\n"
    )
    read = (
        f"{libc}shm = libc.shmget({key}, 0, 0)\nassert shm >= 0, 'no segment'\n"
        "print(ctypes.string_at(libc.shmat(shm, None, 0), 16))"
    )
    with one_worker.session(images=[make_image()]) as a:
        written = a.run(write)
    with one_worker.session(images=[make_image()]) as b:
        r = b.run(read)
    assert not written.ok  # shmget is denied outright
    assert marker not in r.stdout
    assert not r.ok and "no segment" in r.error


@needs_root
def test_a_session_never_gets_the_uid_of_one_whose_folder_exists(one_worker: Sandbox) -> None:
    """Before: uids were `block + number % 65536`, so session 65 536 shared session 0's uid and
    read its folder given the path."""
    a = one_worker.session(images=[make_image()])
    assert a.run("open('secret.txt', 'w').write('A-SECRET')").ok
    one_worker._session_ids = itertools.count(1 << 16)  # the next session is number 65 536
    with one_worker.session(images=[make_image()]) as b:
        r = b.run(f"print(open('{a.host_output_dir}/secret.txt').read())")
    a.close()
    assert b.uid != a.uid
    assert not r.ok and "PermissionError" in r.error


def test_uid_pool_reuses_a_uid_only_after_release() -> None:
    pool = folders.UidPool(1000, 3)
    first = [pool.allocate() for _ in range(3)]
    assert sorted(first) == [1000, 1001, 1002]
    with pytest.raises(Exception, match="session uids are in use"):
        pool.allocate()
    pool.release(1001)
    assert pool.allocate() == 1001


SLOW_SAVE = (
    "class Slow:\n    def __reduce__(self):\n        time.sleep(60)\n        return (int, (1,))\n"
)


def _live_pids(uid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith("Z"):
            pids.append(int(entry.name))
    return pids


@needs_root
def test_a_slow_save_delays_no_other_session_and_dies_with_its_session(
    one_worker: Sandbox,
) -> None:
    """Before: the worker waited for A's save (up to A's deadline) before serving B. Now B is
    answered while A's save still runs, and closing A kills that save."""
    a = one_worker.session(images=[make_image()])
    assert a.run(SLOW_SAVE + "x = Slow()").ok  # answered; the save sleeps
    with one_worker.session(images=[make_image()]) as b:
        for _ in range(2):  # before, the second one waited for A's save
            assert_benign_call_works(b)
    assert _live_pids(a.uid)  # B was served while A's save was still running
    a.close()
    assert _dies(a.uid)


def _dies(uid: int) -> bool:
    for _ in range(200):  # SIGKILL is sent by close(); the exit itself takes a moment
        if not _live_pids(uid):
            return True
        time.sleep(0.01)
    return False


DETACH_AND_FORK = """
for detach in (os.setsid, os.setpgrp, lambda: os.setpgid(0, 0)):
    try:
        detach()
    except OSError:
        pass
try:
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
except OSError:
    pass
"""


@needs_root
def test_code_that_tries_to_detach_and_fork_leaves_no_process_behind_its_session(
    one_worker: Sandbox,
) -> None:
    """Closing kills what its worker knows of (the session's savers), without scanning /proc:
    a child that could leave its process group and fork a grandchild would escape that."""
    a = one_worker.session(images=[make_image()])
    assert a.run(DETACH_AND_FORK + SLOW_SAVE + "x = Slow()").ok  # its save sleeps too
    assert _live_pids(a.uid)
    a.close()
    assert _dies(a.uid)


def test_closing_does_not_wait_for_another_sessions_call(one_worker: Sandbox) -> None:
    """The worker ends a closed session's savers between, and during, other sessions' calls."""
    a = one_worker.session(images=[make_image()])
    assert a.run(SLOW_SAVE + "x = Slow()").ok
    with one_worker.session(images=[make_image()]) as b:
        long_call = threading.Thread(target=b.run, args=("time.sleep(4)",))
        long_call.start()
        time.sleep(0.5)  # B's call is running on the only worker
        a.close()
        assert long_call.is_alive()  # A's close did not wait for it
        assert _dies(a.uid)
        long_call.join()


@needs_root
def test_closing_asks_the_worker_and_scans_proc_only_where_it_cannot_vouch(
    one_worker: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No process ever ran as a session's uid unless one of its calls reached a worker: the
    others close without anything to kill. The worker that ran all of a session's calls kills
    its savers; /proc is scanned (about 1 ms) only where that worker was replaced meanwhile or
    does not answer."""
    scanned: list[int] = []
    real_kill = folders.kill_uid
    monkeypatch.setattr(folders, "kill_uid", lambda uid: scanned.append(uid) or real_kill(uid))
    idle = one_worker.session(images=[make_image()])
    refused = one_worker.session(images=[make_image()])
    assert not refused.run("x = 1\n" * one_worker.config.max_code_chars).ok  # never sent
    ran = one_worker.session(images=[make_image()])
    assert ran.run(SLOW_SAVE + "x = Slow()").ok
    for session in (idle, refused, ran):
        session.close()
    assert scanned == [] and _dies(ran.uid)

    moved = one_worker.session(images=[make_image()])
    assert moved.run("x = 1").ok
    moved._slot.replace()  # as after a worker grew too large or died
    assert moved.run("y = 2").ok
    moved.close()
    assert scanned == [moved.uid]

    mute = one_worker.session(images=[make_image()])
    assert mute.run(SLOW_SAVE + "x = Slow()").ok

    def no_answer(worker: Worker, session: str, deadline: float) -> int:
        raise WorkerDied("no answer")

    monkeypatch.setattr(Worker, "end_session", no_answer)
    mute.close()
    assert scanned == [moved.uid, mute.uid] and _dies(mute.uid)


def test_stale_roots_of_killed_sandboxes_are_removed(tmp_path: Path) -> None:
    parent = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = Path(tempfile_root(parent))
    (stale / folders.OWNER_FILE).write_text(f"{dead.pid} 1")
    (stale / "000000-abcd" / "deep").mkdir(parents=True)
    alive = Path(tempfile_root(parent))
    folders.write_owner(str(alive))
    try:
        with Sandbox(tight_config(num_workers=1)) as sb:
            sb.wait_for_cleanup()
            assert not stale.exists()
            assert alive.exists()  # its owner (this process) is still running
    finally:
        folders.remove_tree(str(stale))
        folders.remove_tree(str(alive))


def tempfile_root(parent: str | None) -> str:
    return tempfile.mkdtemp(prefix=folders.ROOT_PREFIX, dir=parent)


def test_closing_with_deep_folders_left_open_never_raises() -> None:
    """Before: 3 000 nested folders made Session.close() and Sandbox.close() raise
    RecursionError (shutil.rmtree) and left the root behind."""
    deep = "for _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')"
    sb = Sandbox(tight_config(num_workers=1, session_files=10_000))
    closed = sb.session(images=[make_image()])
    left_open = sb.session(images=[make_image()])
    for session in (closed, left_open):
        assert session.run(deep).ok
    closed.close()
    sb.close()  # left_open is still open
    assert not os.path.exists(sb.root)


def test_a_worker_that_cannot_start_leaves_no_descriptors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its "end" pipes are made before the process: a failed start closes them too."""
    (tmp_path / "_code").mkdir()

    def no_launcher(*args: object, **kwargs: object) -> None:
        raise FileNotFoundError("bwrap")

    monkeypatch.setattr(subprocess, "Popen", no_launcher)
    before = sorted(os.listdir("/proc/self/fd"))
    for _ in range(3):
        with pytest.raises(FileNotFoundError):
            Worker("none", str(tmp_path), startup_timeout_s=1.0)
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_every_worker_runs_with_the_seccomp_deny_list(one_worker: Sandbox) -> None:
    """On a machine where the filter does not load, this fails instead of the sandbox quietly
    running code that may setsid, open sockets or exec."""
    session = one_worker.session(images=[])
    assert session.run("print(1)").ok
    assert session._workers and all(w.seccomp for w in session._workers)


@pytest.mark.parametrize("required", [True, False])
def test_a_worker_without_seccomp_is_refused_unless_allowed(
    required: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker that reports its filter unavailable (no libseccomp, say) is killed and the
    sandbox refuses to start, naming the setting; with sandbox.require_seccomp=false it runs
    with a warning."""
    read = Worker._read

    def without_filter(self: Worker, *args: object, **kwargs: object) -> object:
        message = read(self, *args, **kwargs)
        if message.header.get("op") == "ready":
            message.header["seccomp"] = "unavailable: libseccomp.so.2 not found"
        return message

    monkeypatch.setattr(Worker, "_read", without_filter)
    config = tight_config(num_workers=1, require_seccomp=required)
    if required:
        with pytest.raises(SandboxError, match=r"sandbox\.require_seccomp=false"):  # noqa: SIM117
            with Sandbox(config) as sb:
                sb.session(images=[]).run("print(1)")
        return
    with Sandbox(config) as sb:
        assert sb.session(images=[]).run("print(1)").ok
    assert "WITHOUT seccomp" in caplog.text
