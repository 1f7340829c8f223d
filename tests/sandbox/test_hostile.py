"""Hostile code, grouped by attack. Every snippet must be contained.

For each snippet: the call ends with a clear error or a timeout (which of the two comes first
depends on how busy the machine is, so either counts as contained), or harmlessly where the
attack is defeated silently; it never prints PWNED (snippets print it only if the attack worked),
every text in the result is valid UTF-8, closing its session never raises,
nothing on the host changes (a sentinel file in the test's folder, the host /tmp, a neighbouring
session's files, the input image), no connection reaches a real socket listening on localhost,
and the very next benign call in the same session gives exactly the right answer.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Literal

import pytest

import beacon
from beacon.sandbox import ExecResult, Sandbox, Session

from .helpers import assert_benign_call_works, make_image, tight_config

Outcome = Literal["contained", "ok"]  # contained: an error or a timeout, whichever came first

SECRET_NAME = "BEACON_TEST_SECRET_TOKEN"
SECRET_VALUE = f"secret-{uuid.uuid4()}"
HOST_PWNED = Path("/tmp/beacon_pwned")


@dataclass(frozen=True)
class Attack:
    group: str
    name: str
    code: str  # string.Template: $sentinel $host_dir $project_file $port $secret_name ...
    outcome: Outcome = "contained"
    error_has: str = ""  # text the error must contain (unless the call timed out first)
    note_has: str = ""  # text one of the notes must contain
    needs_quota: bool = False  # only where the sandbox runs as root (tmpfs quotas)
    followup: str | None = None  # the next call, checked instead: it loads what was carried
    images: int | None = None  # exact number of returned images, where it matters
    stdout: str | None = None  # exact output, where the attack must change nothing visible
    notes: tuple[str, ...] | None = None  # exact notes, where a false one is the attack's harm

    @property
    def id(self) -> str:
        return f"{self.group}-{self.name}"


PNG_BOMB = r"""
import struct, zlib
def chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))
head = struct.pack('>IIBBBBB', 30000, 30000, 8, 0, 0, 0, 0)
png = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', head)
png += chunk(b'IDAT', zlib.compress(b'\x00' * 30001 * 16)) + chunk(b'IEND', b'')
open('bomb.png', 'wb').write(png)
"""

STATE_FILE = "state = os.path.join(os.path.dirname(output_dir), 'state', 'vars.pkl')\n"


SLOW_SAVE = (
    "import time\nclass Slow:\n    def __reduce__(self):\n        time.sleep(0.4)\n"
    "        return (int, (7,))\n"
)
"""A carried value whose save takes 0.4 s: the next call comes while it is still saved."""

LOCK_FDS = (
    "def lock_fds():\n    found = []\n    for name in os.listdir('/proc/self/fd'):\n"
    "        try:\n            target = os.readlink(f'/proc/self/fd/{name}')\n"
    "        except OSError:\n            continue\n"
    "        if target.endswith('vars.pkl.lock'):\n            found.append(int(name))\n"
    "    return found\n"
)

INHERITED = """
import fcntl
writable = []
for name in os.listdir('/proc/self/fd'):
    fd = int(name)
    try:
        target, mode = os.readlink(f'/proc/self/fd/{fd}'), fcntl.fcntl(fd, fcntl.F_GETFL) & 3
    except OSError:
        continue  # the listing's own descriptor, closed by now
    if fd > 2 and mode != os.O_RDONLY:
        writable.append('pipe' if target.startswith('pipe:') else target)
print(sorted(writable))
"""
"""Every descriptor the code holds beyond 0-2 that it could write through: only its result
pipe (read-only maps of its own inputs and carried variables are allowed)."""


def _reduce_to(call: str) -> str:
    return f"class Evil:\n    def __reduce__(self):\n        return {call}\nx = Evil()\n"


ATTACKS = [
    # --- read host files
    Attack("read-host", "etc-shadow", "print(open('/etc/shadow').read())"),
    Attack("read-host", "project-file", "print(open('$project_file').read())"),
    Attack("read-host", "test-tmp-file", "print(open('$sentinel').read())"),
    Attack("read-host", "list-test-dir", "print(os.listdir('$host_dir'))"),
    Attack("read-host", "symlink", "os.symlink('$sentinel', 'l')\nprint(open('l').read())"),
    Attack("read-host", "neighbour-session", "print(open('$other_file').read())"),
    Attack(
        "read-host",
        "glob-home-and-work",
        "import glob\nfound = glob.glob('/root/*') + glob.glob('/home/*/*') + "
        "glob.glob('/work/*/pyproject.toml')\nassert found, 'nothing found'\nprint('PWNED', found)",
    ),
    # --- write outside the episode folder
    Attack("write-outside", "host-tmp", "open('/tmp/beacon_pwned', 'w').write('x')"),
    Attack("write-outside", "test-dir", "open('$host_dir/pwned.txt', 'w').write('x')"),
    Attack("write-outside", "overwrite-sentinel", "open('$sentinel', 'w').write('changed')"),
    Attack("write-outside", "usr", "open('/usr/lib/pwned', 'w').write('x')"),
    Attack("write-outside", "input-image", "open(image_path, 'wb').write(b'garbage')"),
    Attack("write-outside", "delete-input", "os.remove(image_path)"),
    Attack("write-outside", "neighbour-session", "open('$other_dir/pwned.txt', 'w').write('x')"),
    Attack(
        "write-outside",
        "file-size-limit",
        "with open('big.bin', 'wb') as f:\n    f.write(b'0' * (64 << 20))",
        error_has="File too large",
    ),
    Attack("write-outside", "mnt", "os.makedirs('/mnt/data/elsewhere', exist_ok=True)"),
    # --- network, including a real socket listening on the host's localhost
    Attack(
        "network",
        "tcp-localhost",
        "import socket\nsocket.create_connection(('127.0.0.1', $port), timeout=1)\nprint('PWNED')",
    ),
    Attack(
        "network",
        "http-localhost",
        "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:$port/', timeout=1)",
    ),
    Attack("network", "dns", "import socket\nprint(socket.gethostbyname('example.com'))"),
    Attack(
        "network",
        "unix-socket",
        "import socket\nsocket.socket(socket.AF_UNIX).connect('/run/systemd/private')",
    ),
    Attack(
        "network",
        "udp",
        "import socket\n"
        "socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', $port))",
    ),
    Attack("network", "ipv6", "import socket\nsocket.create_connection(('::1', $port), timeout=1)"),
    Attack("network", "socketpair", "import socket\nsocket.socketpair()"),
    Attack(
        "network",
        "raw-syscall",
        "import ctypes\nfd = ctypes.CDLL(None).syscall(41, 2, 1, 0)\n"
        "assert fd >= 0, 'socket syscall refused'\nprint('PWNED')",
    ),
    # --- subprocess, os.system, exec
    Attack(
        "subprocess",
        "os-system",
        "rc = os.system('touch /tmp/beacon_pwned')\nassert rc == 0, f'os.system gave {rc}'\n"
        "print('PWNED')",
    ),
    Attack("subprocess", "subprocess-run", "import subprocess\nsubprocess.run(['id'])"),
    Attack(
        "subprocess",
        "shell",
        "import subprocess\nprint(subprocess.check_output('cat /etc/hostname', shell=True))",
    ),
    Attack("subprocess", "popen", "print(os.popen('id').read())"),
    Attack("subprocess", "execv", "os.execv('/bin/sh', ['sh', '-c', 'id'])"),
    Attack("subprocess", "posix-spawn", "os.posix_spawn('/bin/true', ['true'], {})"),
    Attack("subprocess", "fork", "pid = os.fork()\nprint('PWNED' if pid else 'child')"),
    Attack(
        "subprocess",
        "multiprocessing",
        "import multiprocessing\np = multiprocessing.Process(target=print)\np.start()\np.join()",
    ),
    Attack("subprocess", "pty", "import pty\npty.spawn('/bin/sh')"),
    Attack(
        "subprocess",
        "libc-system",
        "import ctypes\nrc = ctypes.CDLL(None).system(b'id')\n"
        "assert rc == 0, f'system() gave {rc}'\nprint('PWNED')",
    ),
    # --- fork bomb
    Attack("fork-bomb", "fork-loop", "while True:\n    os.fork()"),
    Attack(
        "fork-bomb",
        "thread-bomb",
        "import threading\nfor _ in range(100000):\n"
        "    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()",
    ),
    # --- memory bomb
    Attack("memory-bomb", "bytearray", "x = bytearray(10 ** 10)", error_has="MemoryError"),
    Attack("memory-bomb", "numpy", "a = np.ones((100000, 100000))", error_has="MemoryError"),
    Attack(
        "memory-bomb",
        "growing-list",
        "chunks = []\nwhile True:\n    chunks.append(bytearray(50 << 20))",
        error_has="MemoryError",
    ),
    Attack("memory-bomb", "string", "s = 'x' * (10 ** 10)", error_has="MemoryError"),
    Attack("memory-bomb", "huge-image", "Image.new('RGB', (30000, 30000)).show()"),
    # --- CPU spin
    Attack("cpu-spin", "while-true", "while True:\n    pass", outcome="contained"),
    Attack(
        "cpu-spin", "big-sum", "print(sum(i * i for i in range(10 ** 12)))", outcome="contained"
    ),
    Attack(
        "cpu-spin",
        "ignore-signals",
        "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM, signal.SIGXCPU):\n"
        "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass",
        outcome="contained",
    ),
    Attack("cpu-spin", "regex", "re.match(r'(a+)+$$', 'a' * 64 + 'b')", outcome="contained"),
    Attack(
        "cpu-spin",
        "numpy-loop",
        "while True:\n    np.random.rand(64, 64) @ np.random.rand(64, 64)",
        outcome="contained",
    ),
    # --- endless output
    Attack(
        "endless-output", "print-loop", "while True:\n    print('x' * 1000)", outcome="contained"
    ),
    Attack("endless-output", "one-huge-print", "print('y' * 10 ** 7)", outcome="ok"),
    Attack(
        "endless-output",
        "stderr-flood",
        "import sys\nfor _ in range(100000):\n    sys.stderr.write('e' * 100)",
        outcome="ok",
    ),
    Attack(
        "endless-output",
        "raw-fd-writes",
        "for _ in range(200):\n    os.write(1, b'z' * 100000)\nprint('done')",
        outcome="ok",
    ),
    # --- leaving the session's process group or session: the cleanup must still find it
    Attack("detach", "setsid", "os.setsid()\nprint('PWNED')", error_has="PermissionError"),
    Attack("detach", "setpgid", "os.setpgid(0, 0)\nprint('PWNED')", error_has="PermissionError"),
    Attack("detach", "setpgrp", "os.setpgrp()\nprint('PWNED')", error_has="PermissionError"),
    Attack(
        "detach",
        "libc-setsid",
        "import ctypes\nassert ctypes.CDLL(None).setsid() >= 0, 'setsid refused'\nprint('PWNED')",
    ),
    # --- signals to the parent
    Attack("signals", "kill-parent", "os.kill(os.getppid(), 9)"),
    Attack("signals", "term-parent", "import signal\nos.kill(os.getppid(), signal.SIGTERM)"),
    Attack("signals", "kill-everything", "os.kill(-1, 9)"),
    Attack("signals", "kill-init", "os.kill(1, 9)"),
    Attack("signals", "kill-own-group", "os.killpg(os.getpgid(0), 9)"),
    # --- scheduling: without a uid of its own the code could starve its worker or raise
    # itself above the other sessions' calls
    Attack(
        "scheduling",
        "realtime-self",
        "os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))\nprint('PWNED')",
        error_has="PermissionError",
    ),
    Attack(
        "scheduling",
        "raise-own-priority",
        "os.setpriority(os.PRIO_PROCESS, 0, -10)\nprint('PWNED')",
        error_has="PermissionError",
    ),
    Attack(
        "scheduling",
        "idle-the-worker",
        "os.sched_setscheduler(os.getppid(), os.SCHED_IDLE, os.sched_param(0))\nprint('PWNED')",
        error_has="PermissionError",
    ),
    Attack(
        "scheduling",
        "nice-the-worker",
        "os.setpriority(os.PRIO_PROCESS, os.getppid(), 19)\nprint('PWNED')",
        error_has="PermissionError",
    ),
    Attack(
        "scheduling",
        "capabilities-left",
        "caps = [ln.split() for ln in open('/proc/self/status') if ln.startswith('Cap')]\n"
        "print('PWNED' if any(int(v, 16) for k, v in caps if k[3:6] in 'PrmEffAmb') else 'none')",
        outcome="ok",
    ),
    Attack(
        "signals",
        "pthread-kill",
        "import signal, threading\nsignal.pthread_kill(threading.main_thread().ident, 9)",
    ),
    # --- ptrace and reading other processes' memory
    Attack(
        "ptrace",
        "attach-parent",
        "import ctypes\nassert ctypes.CDLL(None).ptrace(16, os.getppid(), 0, 0) == 0, "
        "'ptrace refused'\nprint('PWNED')",
    ),
    Attack(
        "ptrace",
        "traceme",
        "import ctypes\nassert ctypes.CDLL(None).ptrace(0, 0, 0, 0) == 0, 'ptrace refused'",
    ),
    Attack(
        "ptrace",
        "process-vm-readv",
        "import ctypes\nbuf = ctypes.create_string_buffer(16)\n"
        "local = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 16)\n"
        "remote = (ctypes.c_void_p * 2)(0x400000, 16)\n"
        "n = ctypes.CDLL(None).process_vm_readv(os.getppid(), local, 1, remote, 1, 0)\n"
        "assert n > 0, 'process_vm_readv refused'\nprint('PWNED')",
    ),
    Attack("ptrace", "parent-mem", "print(open(f'/proc/{os.getppid()}/mem', 'rb').read(16))"),
    # --- ctypes
    Attack("ctypes", "segfault", "import ctypes\nctypes.string_at(0)", error_has="SIGSEGV"),
    Attack(
        "ctypes",
        "setuid-root",
        "import ctypes\nassert ctypes.CDLL(None).setuid(0) == 0, 'setuid refused'\nprint('PWNED')",
    ),
    Attack(  # a no-op any uid may make: refused by seccomp alone
        "ctypes",
        "setresuid-noop",
        "import ctypes\nassert ctypes.CDLL(None).setresuid(-1, -1, -1) == 0, 'setresuid refused'\n"
        "print('PWNED')",
    ),
    Attack(
        "ctypes",
        "unshare-userns",
        "import ctypes\nassert ctypes.CDLL(None).unshare(0x10000000) == 0, 'unshare refused'\n"
        "print('PWNED')",
    ),
    Attack(
        "ctypes",
        "mount",
        "import ctypes\n"
        "assert ctypes.CDLL(None).mount(b'none', b'/tmp', b'tmpfs', 0, None) == 0, 'mount refused'",
    ),
    Attack(
        "ctypes", "bpf", "import ctypes\nassert ctypes.CDLL(None).syscall(321, 0, 0, 0) >= 0, 'no'"
    ),
    Attack("ctypes", "abort", "import ctypes\nctypes.CDLL(None).abort()"),
    # --- /proc tricks
    Attack("proc", "init-environ", "print(open('/proc/1/environ').read())"),
    Attack("proc", "parent-environ", "print(open(f'/proc/{os.getppid()}/environ').read())"),
    Attack("proc", "parent-maps", "print(open(f'/proc/{os.getppid()}/maps').read())"),
    Attack("proc", "init-root", "print(os.listdir('/proc/1/root'))"),
    Attack(
        "proc",
        "host-pids",
        "assert '$host_pid' in os.listdir('/proc'), 'host pid not visible'\nprint('PWNED')",
    ),
    Attack("proc", "sysctl-write", "open('/proc/sys/kernel/hostname', 'w').write('pwned')"),
    # --- environment-variable secrets
    Attack("env-secrets", "environ", "print(os.environ['$secret_name'])"),
    Attack(
        "env-secrets",
        "getenv",
        "value = os.getenv('$secret_name')\nassert value, 'no secret'\nprint('PWNED', value)",
    ),
    Attack(
        "env-secrets",
        "proc-self-environ",
        "env = open('/proc/self/environ').read()\nassert '$secret_name' in env, 'no secret'\n"
        "print('PWNED')",
    ),
    Attack(
        "env-secrets",
        "scan-proc",
        "found = []\nfor pid in os.listdir('/proc'):\n    try:\n"
        "        found.append(open(f'/proc/{pid}/environ').read())\n    except OSError:\n"
        "        pass\nassert any('$secret_name' in e for e in found), 'no secret'\nprint('PWNED')",
    ),
    # --- killing or confusing the worker
    Attack("kill-worker", "exit-early", "os._exit(0)", error_has="before reporting"),
    Attack("kill-worker", "system-exit", "raise SystemExit(3)", error_has="SystemExit"),
    Attack("kill-worker", "close-result-pipe", "os.closerange(3, 1024)\nprint('still here')"),
    Attack(
        "kill-worker",
        "garbage-frame",
        "for fd in range(3, 64):\n    try:\n        os.write(fd, b'\\xff' * 4096)\n"
        "    except OSError:\n        pass",
        error_has="malformed",
    ),
    Attack(
        "kill-worker",
        "fake-done-marker",
        "for fd in range(3, 64):\n    try:\n        os.write(fd, b'\\x00BEACON-RESULT-COMPLETE')\n"
        "    except OSError:\n        pass\nwhile True:\n    pass",
        error_has="before reporting",
    ),
    # --- huge images
    Attack("huge-images", "show-30000", "Image.new('1', (30000, 30000)).show()"),
    Attack(
        "huge-images",
        "bomb-file-printed",
        PNG_BOMB + "print(os.path.abspath('bomb.png'))",
        error_has="refused",
    ),
    Attack(
        "huge-images",
        "bomb-file-processed-path",
        PNG_BOMB + "processed_path = os.path.abspath('bomb.png')",
        error_has="refused",
    ),
    Attack(
        "huge-images",
        "not-an-image",
        "processed_path = '/proc/self/environ'",
        outcome="ok",
        note_has="could not be read as an image",
    ),
    Attack(
        "huge-images",
        "unreadable-printed-path",
        "image.crop((0, 0, 8, 8)).save('real.png')\nopen('fake.png', 'w').write('no image')\n"
        "print(os.path.abspath('fake.png'), os.path.abspath('real.png'))",
        outcome="ok",
        images=1,
        note_has="fake.png could not be read as an image",
    ),
    Attack(
        "huge-images",
        "too-many-images",
        "for i in range(50):\n    image.crop((i % 10, 0, i % 10 + 8, 8)).show()",
        outcome="ok",
        images=4,
    ),
    # --- pickle bombs and malicious __reduce__ in carried state (the follow-up loads it)
    Attack(
        "carried-state",
        "reduce-os-system",
        _reduce_to("(os.system, ('touch /tmp/beacon_pwned',))"),
        followup="assert x == 0, f'os.system gave {x}'\nprint('PWNED')",
    ),
    Attack(
        "carried-state",
        "reduce-spin",
        _reduce_to("(exec, ('while True: pass',))"),
        followup="print(x)",
        outcome="contained",
    ),
    Attack(
        "carried-state",
        "reduce-memory",
        _reduce_to("(bytearray, (10 ** 10,))"),
        followup="print(x)",
        error_has="NameError",
    ),
    Attack(
        "carried-state",
        "reduce-kill-parent",
        _reduce_to("(os.kill, (os.getppid(), 9))"),
        followup="print(x)",
        error_has="NameError",
    ),
    Attack(
        "carried-state",
        "garbage-state-file",
        "x = 1\n" + STATE_FILE + "open(state, 'wb').write(b'not a pickle')\nos._exit(0)",
        followup="print(x)",
        error_has="NameError",
    ),
    Attack(
        "carried-state",
        "state-file-bomb",
        "import pickle\nclass Bomb:\n    def __reduce__(self):\n"
        "        return (bytearray, (10 ** 10,))\n"
        + STATE_FILE
        + "open(state, 'wb').write(pickle.dumps(Bomb()))\nos._exit(0)",
        followup="print(x)",
        error_has="NameError",
    ),
    Attack(
        "carried-state",
        "save-made-impossible",
        "x = 1\n" + STATE_FILE + "os.mkdir(state + '.tmp')",
        followup="print(x)",
        error_has="NameError",
        note_has="variables from the previous call were not carried over",
    ),
    # --- the session's turns at its state: the code must not see, hold, release or forge them
    Attack(
        "state-lock",
        "inherited-descriptors",
        INHERITED,
        outcome="ok",
        stdout="['pipe']\n",
    ),
    Attack(
        "state-lock",
        "release-held-lock",
        SLOW_SAVE
        + LOCK_FDS
        + "import fcntl\nfor fd in lock_fds():\n    fcntl.flock(fd, fcntl.LOCK_UN)\nx = Slow()",
        followup="print(x)",
        outcome="ok",
        stdout="7\n",
    ),
    Attack(
        "state-lock",
        "close-held-lock",
        SLOW_SAVE + LOCK_FDS + "for fd in lock_fds():\n    os.close(fd)\nx = Slow()",
        followup="print(x)",
        outcome="ok",
        stdout="7\n",
    ),
    Attack(
        "state-lock",
        "hold-lock-path",
        "import fcntl\n" + STATE_FILE + "held = os.open(state + '.lock', os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(held, fcntl.LOCK_EX)\nx = 7",
        followup="print(x)",
        outcome="ok",
        stdout="7\n",
    ),
    Attack(
        "state-lock",
        "write-lock-path",
        STATE_FILE + "with open(state + '.lock', 'wb') as f:\n    f.write(b'\\xff' * 8)\nx = 7",
        followup="print(x)",
        outcome="ok",
        stdout="7\n",
        notes=(),
    ),
    Attack(
        "state-lock",
        "lock-path-made-a-folder",
        "x = 1\n" + STATE_FILE + "if os.path.lexists(state + '.lock'):\n"
        "    os.unlink(state + '.lock')\nos.mkdir(state + '.lock')",
        followup="print(x)",
        outcome="ok",
        stdout="1\n",
        notes=(),
    ),
    # --- System V IPC and POSIX message queues: shared by all sessions of a worker
    Attack(
        "ipc",
        "shmget",
        "import ctypes\nshm = ctypes.CDLL(None).shmget(0x1234, 1 << 28, 0o1666)\n"
        "assert shm >= 0, 'shmget refused'\nprint('PWNED')",
    ),
    Attack(
        "ipc",
        "msgget",
        "import ctypes\nq = ctypes.CDLL(None).msgget(0x1234, 0o1666)\n"
        "assert q >= 0, 'msgget refused'\nprint('PWNED')",
    ),
    Attack(
        "ipc",
        "semget",
        "import ctypes\nsem = ctypes.CDLL(None).semget(0x1234, 1, 0o1666)\n"
        "assert sem >= 0, 'semget refused'\nprint('PWNED')",
    ),
    Attack(
        "ipc",
        "mq-open",
        "import ctypes\nq = ctypes.CDLL(None).mq_open(b'/beacon', 0o100 | 2, 0o666, None)\n"
        "assert q >= 0, 'mq_open refused'\nprint('PWNED')",
    ),
    Attack(
        "ipc",
        "raw-shmget",
        "import ctypes\nshm = ctypes.CDLL(None).syscall(29, 0x1234, 1 << 20, 0o1666)\n"
        "assert shm >= 0, 'shmget refused'\nprint('PWNED')",
    ),
    # --- disk: each session's folder has its own size and inode quota
    Attack(
        "disk-quota",
        "fill-folder",
        "for i in range(64):\n    open(f'f{i}', 'wb').write(b'0' * (8 << 20))",
        error_has="No space left",
        needs_quota=True,
    ),
    Attack(
        "disk-quota",
        "inode-storm",
        "for i in range(100000):\n    open(f'f{i}', 'w').close()",
        error_has="No space left",
        needs_quota=True,
    ),
    Attack(
        "disk-quota",
        "folder-storm",
        "for i in range(100000):\n    os.mkdir(f'd{i}')",
        error_has="No space left",
        needs_quota=True,
    ),
    # --- returned images travel through files in the session's folder (wire.image_file)
    Attack(
        "image-files",
        "symlink-at-the-name",
        "for c in range(1, 4):\n    for i in range(4):\n"
        "        os.symlink('$sentinel', f'.beacon-image-{c}-{i}')\nimage.show()",
        outcome="ok",
        images=1,
    ),
    Attack(
        "image-files",
        "fifo-at-the-name",
        "for c in range(1, 4):\n    for i in range(4):\n"
        "        os.mkfifo(f'.beacon-image-{c}-{i}')\nimage.show()",
        outcome="ok",
        images=1,
    ),
    Attack(
        "image-files",
        "folder-not-writable",
        "os.chmod(output_dir, 0o500)\nimage.show()",
        outcome="ok",
        images=1,
    ),
    Attack(
        "image-files",
        "quota-full",
        "try:\n    with open('fill', 'wb') as f:\n        while True:\n"
        "            f.write(b'0' * (1 << 20))\nexcept OSError:\n    pass\nimage.show()",
        outcome="ok",
        images=1,
        needs_quota=True,
    ),
    # --- the trusted side must never crash or stall on what the code leaves behind
    Attack(
        "trusted-side",
        "deep-output-folders",
        "for _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\nprint('made')",
        outcome="ok",
    ),
    Attack(
        "trusted-side",
        "deep-state-folders",
        "x = 1\n" + STATE_FILE + "os.unlink(state) if os.path.isfile(state) else None\n"
        "os.mkdir(state)\nos.chdir(state)\nfor _ in range(3000):\n    os.mkdir('d')\n"
        "    os.chdir('d')\nos._exit(0)",
        followup="print(x)",
        error_has="NameError",
    ),
    Attack(
        "trusted-side",
        "forged-nested-frame",
        "import struct\nhead = b'[' * 60000 + b']' * 60000\n"
        "frame = struct.pack('<I', len(head)) + head + b'\\x00BEACON-RESULT-COMPLETE'\n"
        "for fd in range(3, 64):\n    try:\n        os.write(fd, frame)\n"
        "    except OSError:\n        pass\nos._exit(0)",
        error_has="malformed",
    ),
    Attack(
        "trusted-side",
        "lone-surrogate-stdout",
        "print('caf\\udce9', 'x\\ud800y')",
        outcome="ok",
    ),
    Attack(
        "trusted-side",
        "lone-surrogate-error",
        "raise ValueError('caf\\udce9')",
        error_has="ValueError: caf",
    ),
    Attack(
        "trusted-side",
        "huge-code",
        "x = 1\n" + "cv.a;" * 199_999,
        error_has="max_code_chars",
    ),
]


@dataclass
class Host:
    """Things on the host that no snippet may read or change."""

    dir: Path
    sentinel: Path
    neighbour: Session
    fields: dict[str, str] = field(default_factory=dict)

    def assert_unchanged(self) -> None:
        assert self.sentinel.read_text() == self.fields["secret_text"]
        assert sorted(p.name for p in self.dir.iterdir()) == ["sentinel.txt"]
        assert not HOST_PWNED.exists()
        neighbour = Path(self.neighbour.host_output_dir)
        assert sorted(p.name for p in neighbour.iterdir()) == ["secret.txt"]
        assert (neighbour / "secret.txt").read_text() == "NEIGHBOUR-SECRET"


@pytest.fixture(scope="module")
def listener() -> Iterator[tuple[int, list]]:
    """A real TCP server on the host's localhost that records every connection."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.1)
    hits: list = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, addr = server.accept()
            except TimeoutError:
                continue
            hits.append(addr)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], hits
    stop.set()
    thread.join()
    server.close()


@pytest.fixture(scope="module")
def jail(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """The sandbox, started while the test process holds a secret in its environment."""
    os.environ[SECRET_NAME] = SECRET_VALUE
    try:
        with Sandbox(tight_config(session_disk_mb=64, session_files=5000)) as sb:
            yield sb
    finally:
        os.environ.pop(SECRET_NAME, None)


@pytest.fixture(scope="module")
def host(jail: Sandbox, tmp_path_factory: pytest.TempPathFactory, listener) -> Iterator[Host]:
    folder = tmp_path_factory.mktemp("host")
    secret_text = f"TOP-SECRET-SENTINEL-{uuid.uuid4()}"
    sentinel = folder / "sentinel.txt"
    sentinel.write_text(secret_text)
    neighbour = jail.session(images=[make_image()])
    assert neighbour.run("open('secret.txt', 'w').write('NEIGHBOUR-SECRET')").ok
    project = Path(beacon.__file__).resolve().parents[2] / "pyproject.toml"
    fields = {
        "sentinel": str(sentinel),
        "host_dir": str(folder),
        "project_file": str(project),
        "port": str(listener[0]),
        "secret_name": SECRET_NAME,
        "secret_text": secret_text,
        "host_pid": str(os.getpid()),
        "other_file": os.path.join(neighbour.host_output_dir, "secret.txt"),
        "other_dir": neighbour.host_output_dir,
    }
    HOST_PWNED.unlink(missing_ok=True)
    yield Host(folder, sentinel, neighbour, fields)
    neighbour.close()


def _check_outcome(result: ExecResult, attack: Attack) -> None:
    """Containment, not which limit struck first: on a busy machine a memory bomb may time out
    before it fails, and a spin may hit its CPU limit before the wall clock."""
    if attack.outcome == "contained":
        assert not result.ok and result.error
        if not result.timed_out:
            assert attack.error_has in result.error
    else:
        assert result.ok, result.error
    assert any(attack.note_has in note for note in result.notes or [""])
    if attack.images is not None:
        assert len(result.images) == attack.images
    if attack.stdout is not None:
        assert result.stdout == attack.stdout
    if attack.notes is not None:
        assert result.notes == list(attack.notes)
    texts = [result.stdout, result.error, result.notes, result.repairs, result.code]
    json.dumps(texts, ensure_ascii=False).encode("utf-8")  # a JSONL writer can write it


def test_there_are_at_least_fifty_attacks() -> None:
    assert len(ATTACKS) >= 50
    assert len({a.id for a in ATTACKS}) == len(ATTACKS)


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.id)
def test_attack_is_contained(attack: Attack, jail: Sandbox, host: Host, listener) -> None:
    assert os.environ[SECRET_NAME] == SECRET_VALUE
    if attack.needs_quota and not jail.quotas:
        pytest.skip("session quotas need the sandbox to run as root")
    with jail.session(images=[make_image()]) as session:
        input_bytes = Path(session.host_image_paths[0]).read_bytes()
        result = session.run(Template(attack.code).substitute(host.fields))
        if attack.followup is not None:
            result = session.run(attack.followup)
        _check_outcome(result, attack)
        for text in (result.stdout, result.error or "", *result.notes):
            assert "PWNED" not in text
            assert host.fields["secret_text"] not in text
            assert SECRET_VALUE not in text
        assert listener[1] == []
        host.assert_unchanged()
        assert Path(session.host_image_paths[0]).read_bytes() == input_bytes
        assert_benign_call_works(session)
