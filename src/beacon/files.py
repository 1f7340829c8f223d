"""Reading files that data names: only regular files under the data's root, never past a size cap.

A row of a benchmark, a Thyme file or an annotation file was written by someone else, and a path
in it asks this machine to read a file. So every loader reads such files through `read_file`:

1. The path is resolved (`..` and symlinks followed) and must land under the root the user
   named (the dataset folder); a row cannot reach `~/.ssh` through `../` or a symlink.
2. It must be a regular file, checked with `stat` before it is opened and with `fstat` on the
   open descriptor (opened `O_NONBLOCK | O_NOFOLLOW`): a FIFO would block the reader forever,
   `/dev/zero` would fill memory.
3. It is read in 1 MiB chunks and refused once it passes the cap, so neither a file that grows
   nor a zip member whose header lies about its size (`read_capped`) can exhaust memory.

A refusal is a `FileRefused` whose `reason` (`outside_root`, `not_regular_file`, `too_large`,
`missing`, `unreadable`) is what loaders count skipped rows under.

What is not covered: loaders that keep a path and read it later (benchmark images are read when
an episode starts) check it with `path_under` at load time; if the file is swapped for another
regular file in between, the later `read_file` (without a root) reads that one, size-capped.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

MAX_FILE_BYTES = 256 << 20
"""Cap on one file a row names: an 8K photo is ~30 MB, so anything past this is a device, a bomb
or a mistake, not a benchmark image."""

_CHUNK_BYTES = 1 << 20


class FileRefused(ValueError):
    """A file a loader will not read; `reason` is the short key skipped rows are counted under."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def path_under(path: str | Path, root: str | Path | None) -> Path:
    """`path` resolved; refused unless it lies under `root` (resolved too; None: anywhere), or
    when it exists and is not a regular file. A missing file passes: its reader reports it."""
    resolved = Path(path).resolve()
    if root is not None and not resolved.is_relative_to(Path(root).resolve()):
        raise FileRefused(
            "outside_root",
            f"{path} resolves to {resolved}, outside the dataset root {root}; a row may only "
            f"name files under the folder its data was loaded from (put the files under {root})",
        )
    try:
        mode = resolved.stat().st_mode
    except OSError:
        return resolved
    if not stat.S_ISREG(mode):
        raise FileRefused("not_regular_file", f"{path} is not a regular file; refusing to read it")
    return resolved


def read_file(
    path: str | Path, root: str | Path | None = None, max_bytes: int = MAX_FILE_BYTES
) -> bytes:
    """The bytes of `path`, a regular file under `root` of at most `max_bytes` (module docstring).

    Raises FileRefused with the reason; never blocks on a FIFO and never reads past the cap.
    """
    resolved = path_under(path, root)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(resolved, flags)
    except FileNotFoundError:
        raise FileRefused("missing", f"{path} does not exist") from None
    except OSError as exc:
        raise FileRefused("unreadable", f"cannot open {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb", buffering=0) as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # swapped since path_under looked
            raise FileRefused("not_regular_file", f"{path} is not a regular file")
        if info.st_size > max_bytes:
            raise _too_large(str(path), info.st_size, max_bytes)
        return read_capped(file, max_bytes, str(path))


def read_capped(stream: BinaryIO, max_bytes: int, name: str) -> bytes:
    """All of `stream` in bounded chunks; FileRefused as soon as it passes `max_bytes`."""
    chunks: list[bytes] = []
    total = 0
    while chunk := stream.read(min(_CHUNK_BYTES, max_bytes + 1 - total)):
        total += len(chunk)
        if total > max_bytes:
            raise _too_large(name, total, max_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(name: str, size: int, max_bytes: int) -> FileRefused:
    return FileRefused(
        "too_large",
        f"{name} holds more than {max_bytes} bytes (at least {size}), over the cap for one file "
        "a row names; a real image is far smaller, so the row is skipped",
    )
