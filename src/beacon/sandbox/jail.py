"""The namespace jail around the workers: which layer is available and how to start it.

Layers, strongest first:

- **bwrap** (bubblewrap): new network, pid, ipc, uts and cgroup namespaces; a root file system
  built from read-only binds of `/usr`, the Python installation and a few `/etc` files (no
  `/home`, `/root`, `/work` or host `/tmp`), mounted read-only; private `/tmp`, `/dev` and
  `/proc`; the sandbox's root folder bound read-write at its own path. As root, no user
  namespace is made (so children can drop to other uids) and the worker keeps only
  `WORKER_CAPABILITIES`, of those this process holds.
- **unshare** (util-linux): the same namespaces, but the host file system stays visible
  (read access is then limited only by file permissions and the dropped uid).
- **none**: no namespaces; only the per-call rlimits, uid drop and seccomp filter apply. Must be
  chosen explicitly.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

from beacon.sandbox.config import SandboxError

logger = logging.getLogger(__name__)

_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "fonts", "alternatives")
_TOP_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_WORKER_MODULES = ("numpy", "PIL", "cv2", "matplotlib", "pyseccomp")


def resolve_isolation(requested: str) -> str:
    """The isolation layer to use; `auto` takes the strongest one that works here."""
    if requested == "none":
        logger.warning("sandbox isolation is OFF (isolation='none'): code runs on the host")
        return "none"
    candidates = ["bwrap", "unshare"] if requested == "auto" else [requested]
    reasons = []
    for layer in candidates:
        reason = _probe(layer)
        if reason is None:
            logger.info("sandbox isolation: %s", layer)
            return layer
        reasons.append(f"{layer}: {reason}")
    raise SandboxError(
        "no sandbox isolation layer works on this machine (" + "; ".join(reasons) + "). Install "
        "bubblewrap (apt-get install bubblewrap) and allow user namespaces, or set "
        "SandboxConfig(isolation='none') to run model code without namespaces (unsafe)."
    )


def jail_prefix(isolation: str, root_dir: str) -> list[str]:
    """The command words that start a process inside the jail."""
    if isolation == "bwrap":
        return _bwrap_prefix(root_dir)
    if isolation == "unshare":
        user = [] if os.geteuid() == 0 else ["--map-root-user"]
        return [
            "unshare", "--net", "--pid", "--ipc", "--uts", "--mount", "--mount-proc",
            "--fork", "--kill-child", *user, "--",
        ]  # fmt: skip
    return []


MALLOC_TUNABLES = ":".join(
    (
        "glibc.malloc.hugetlb=1",  # malloc'd memory on transparent huge pages
        f"glibc.malloc.mmap_threshold={32 << 20}",  # blocks up to 32 MB from the heap
        f"glibc.malloc.trim_threshold={64 << 20}",  # freed heap memory kept, up to 64 MB
    )
)
"""glibc's malloc settings for the workers and the code: a heap on huge pages, blocks up to
32 MB from it, and what is freed kept there. With them a spare can fault in a block of heap
that the code's allocations then reuse (`worker.warm_up`); with glibc's defaults a child's
first writes to new memory fault once per 4 KB page, and blocks over 128 KB are mapped and
unmapped one by one. Ignored before glibc 2.35; off with `SandboxConfig.speed_tricks`
(docs/sandbox.md, "Speed")."""


def worker_env(root_dir: str, speed_tricks: bool = True) -> dict[str, str]:
    """The whole environment of a worker: nothing from the host (secrets stay out); glibc's
    malloc defaults without `speed_tricks` (`SandboxConfig.speed_tricks`)."""
    one = "1"
    tunables = {"GLIBC_TUNABLES": MALLOC_TUNABLES} if speed_tricks else {}
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": os.path.join(root_dir, "_code", "mpl"),
        "PYTHONDONTWRITEBYTECODE": one,
        "OMP_NUM_THREADS": one,
        "OPENBLAS_NUM_THREADS": one,
        "MKL_NUM_THREADS": one,
        "NUMEXPR_NUM_THREADS": one,
        "VECLIB_MAXIMUM_THREADS": one,
        "OPENCV_FOR_THREADS_NUM": one,
        **tunables,
        # each thread's own malloc arena reserves 64 MB of address space, which RLIMIT_AS counts
        "MALLOC_ARENA_MAX": "2",
    }


WORKER_CAPABILITIES = {"DAC_OVERRIDE": 1, "KILL": 5, "SETGID": 6, "SETUID": 7}
"""What a worker keeps as root, by capability number: entering and cleaning the sessions'
folders (they belong to the sessions' uids), and dropping to those uids."""


def held_capabilities() -> int:
    """The capability bits this process has and may pass on (effective and bounding sets).

    Only these may be asked of bwrap: bubblewrap 0.8 asked for one outside the bounding set
    drops no capability at all.
    """
    sets = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("CapEff:", "CapBnd:")):
            name, value = line.split(":")
            sets[name] = int(value, 16)
    return sets.get("CapEff", 0) & sets.get("CapBnd", 0)


def _bwrap_prefix(root_dir: str) -> list[str]:
    # No --die-with-parent: its PR_SET_PDEATHSIG fires when the *thread* that started bwrap
    # exits. A worker instead exits when its stdin closes, which also happens if we die.
    args = ["bwrap", "--new-session"]
    args += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    args += ["--unshare-cgroup-try"]
    if os.geteuid() == 0:
        held = held_capabilities()
        args += ["--cap-drop", "ALL"]
        for cap, bit in WORKER_CAPABILITIES.items():
            if held >> bit & 1:
                args += ["--cap-add", f"CAP_{cap}"]
    else:
        args += ["--unshare-user"]
    # private /proc, /dev and /tmp first, so that binds below them (a venv or the sandbox's
    # folder under /tmp, say) stay visible
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    args += ["--ro-bind", "/usr", "/usr"]
    for name in _TOP_DIRS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for name in _ETC_FILES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for parent in _ancestors([*python_dirs(), root_dir]):
        args += ["--perms", "0755", "--dir", parent]  # e.g. /root is 0700 on the host
    for path in python_dirs():
        args += ["--ro-bind", path, path]
    args += ["--bind", root_dir, root_dir]
    # each process sees its own session folder (its cwd's parent) at /mnt/data: see sandbox.py
    args += ["--dir", "/mnt", "--symlink", "/proc/self/cwd/..", "/mnt/data"]
    args += ["--remount-ro", "/", "--chdir", "/", "--"]
    return args


def _ancestors(paths: list[str]) -> list[str]:
    """Folders above `paths` (not `/`, not system folders bound whole), parents first."""
    found: set[str] = set()
    for path in paths:
        parent = Path(path).parent
        while str(parent) != "/" and not str(parent).startswith("/usr"):
            found.add(str(parent))
            parent = parent.parent
    return sorted(found, key=lambda p: p.count("/"))


@functools.cache
def python_dirs() -> tuple[str, ...]:
    """Folders the worker's Python needs: the installation, the venv, the imported libraries.

    Only these are bound, never the project tree that an editable install points to.
    """
    wanted = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages()}
    wanted.add(str(Path(os.path.realpath(sys.executable)).parent))
    for name in _WORKER_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            origin = Path(spec.origin)
            wanted.add(str(origin.parent.parent if origin.name == "__init__.py" else origin.parent))
    kept: list[str] = []
    for path in sorted(p for p in wanted if os.path.isdir(p) and p != "/"):
        if path.startswith("/usr/") or any(path.startswith(k + "/") for k in kept):
            continue
        kept.append(path)
    return tuple(kept)


def readable_by_others(paths: tuple[str, ...]) -> bool:
    """True if a different, unprivileged uid can reach and read `paths` on this file system.

    Without bwrap's own view of the file system, a child that dropped to its session's uid
    must read the Python installation in place; under a 0700 home (pyenv in /root) it cannot.
    """
    for path in paths:
        if os.stat(path).st_mode & 0o005 != 0o005:
            return False
        if not all(os.stat(parent).st_mode & 0o001 for parent in Path(path).parents):
            return False
    return True


@functools.cache
def _probe(layer: str) -> str | None:
    """None if `layer` can start a process here, else why not."""
    exe = shutil.which(layer)
    if exe is None:
        return f"`{layer}` is not installed"
    scratch = "/tmp" if layer == "bwrap" else "/"
    cmd = [*jail_prefix(layer, scratch), "/bin/true"]
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run it ({exc})"
    if proc.returncode != 0:
        return f"exit status {proc.returncode}: {proc.stderr.decode(errors='replace').strip()}"
    return None
