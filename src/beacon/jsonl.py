"""JSON Lines files that survive `kill -9`: one reader, one appender, one atomic writer, and one
policy for a bad line, used by every run folder (eval, data, training, annotation) and for the
JSONL files others wrote (datasets, label exports).

A line is committed when it, newline included, is flushed and fsynced (`JsonlWriter`). A file
derived whole from others is written through a temporary name and `os.replace`
(`write_atomic`, `write_jsonl_atomic`), so a reader sees the old file or the new one.

The bad-line policy (`read_jsonl`):

- the **last** line may be torn (no newline, or not parsable): a run killed mid-write, or one still
  writing. Readers skip it with a warning; `repair_jsonl` cuts it off before a run appends again,
  so a resumed run neither duplicates nor drops a line;
- an unparsable line **anywhere else** is corruption, not a kill: `CorruptJsonl` names the file
  and line and says what to do. Nothing guesses around it;
- blank lines are skipped.

A file written whole by someone else (`whole=True`: a dataset, an export, a label file) has no
torn line: its last line needs no newline, and an unparsable line anywhere is `CorruptJsonl`.
`parse_jsonl` applies either policy to lines that do not come from a file of their own (an
archive member).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from beacon.errors import UserError

logger = logging.getLogger(__name__)


class CorruptJsonl(UserError, ValueError):
    """A line other than the last one of a JSONL file does not parse."""


def repair_jsonl(path: Path) -> int:
    """Cut a torn (unterminated or unparsable) last line off `path`; return bytes removed."""
    if not path.exists():
        return 0
    size = path.stat().st_size
    with path.open("rb+") as f:
        if size == 0:
            return 0
        tail_start = max(0, size - (1 << 20))
        f.seek(tail_start)
        tail = f.read()
        keep = _last_good_end(tail, tail_start == 0)
        if keep == len(tail):
            return 0
        f.truncate(tail_start + keep)
    logger.warning("cut a torn last line (%d bytes) off %s", len(tail) - keep, path)
    return len(tail) - keep


def _last_good_end(tail: bytes, from_file_start: bool) -> int:
    """Length of `tail` up to the end of its last complete, parsable line."""
    end = len(tail)
    if not tail.endswith(b"\n"):
        end = tail.rfind(b"\n") + 1
        if end == 0 and not from_file_start:
            return len(tail)  # one huge line that started before the window: leave it
    line_start = tail.rfind(b"\n", 0, max(0, end - 1)) + 1
    if end > line_start:
        try:
            json.loads(tail[line_start:end])
        except ValueError:
            return line_start
    return end


def read_jsonl(path: Path, *, whole: bool = False) -> Iterator[dict[str, Any]]:
    """Parsed lines of ``path`` under the module's policy: a torn last line (unterminated, or
    unparsable) is skipped, an unparsable line elsewhere raises `CorruptJsonl`. A missing file
    reads as empty. With `whole` (a file someone else wrote whole) every line must parse, the
    last one needs no newline, and a missing file raises FileNotFoundError."""
    if not whole and not path.exists():
        return
    with path.open("rb") as f:
        yield from parse_jsonl(f, str(path), whole=whole)


def parse_jsonl(
    lines: Iterable[bytes], source: str, *, whole: bool = False
) -> Iterator[dict[str, Any]]:
    """Parsed `lines` (each with its newline, as a binary file yields them) under
    `read_jsonl`'s policy; `source` names them in messages."""
    bad_line = 0  # an unparsable line is torn if it is the last one, else corruption
    for number, raw in enumerate(lines, start=1):
        if bad_line:
            raise CorruptJsonl(
                f"{source}:{bad_line} is not valid JSON, and only the last line may be torn "
                "by a killed run. Delete or repair that line, then rerun."
            )
        if not whole and not raw.endswith(b"\n"):
            logger.warning("%s: skipping the unterminated last line %d", source, number)
            return
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            if whole:
                raise CorruptJsonl(
                    f"{source}:{number} is not valid JSON; repair or delete that line"
                ) from None
            bad_line = number
            continue
        yield record
    if bad_line:
        logger.warning("%s: skipping the torn last line %d", source, bad_line)


class JsonlWriter:
    """Thread-safe appender that makes each line durable before returning."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = path.open("ab")
        self._lock = threading.Lock()

    def write(self, obj: dict[str, Any] | str) -> None:
        """Append one record (a dict, or a ready JSON string) as a line, flushed and fsynced before
        returning, so a kill never loses a returned write."""
        line = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
        data = (line + "\n").encode()
        with self._lock:
            self._file.write(data)
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        """Close the file; lines already written are durable."""
        with self._lock:
            self._file.close()


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file, so readers never see half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_jsonl_atomic(path: Path, rows: Iterable[dict[str, Any] | str]) -> int:
    """Write JSONL rows (dicts or ready JSON strings) atomically; return the row count."""
    lines = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows]
    write_atomic(path, "".join(line + "\n" for line in lines))
    return len(lines)
