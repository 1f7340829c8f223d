"""What runs inside the locked-down child: the namespace, the code, the returned images.

Runs in the jail next to `worker.py` (copied there with `outputs.py`, `crops.py` and `wire.py`);
it only ever sees one session's data, after rlimits, the uid drop and seccomp are in place. The
input images are mapped from the raw pixel files the trusted side wrote into the session's
folder, so no process that serves other sessions ever holds them.

Thyme compatibility: the code sees `image` (PIL, the original), `image_path` (a readable copy),
the usual modules pre-imported; images come back from `Image.show()`, `plt.show()`, printed
image paths and a new or updated `processed_path` variable. Paths under Thyme's
`/mnt/data/temp_processed_images/` resolve to the session's output folder. `Image.crop` clamps
its box into the image (`crops.clamp_box`) and says so in the call's notes.

Carried variables are pickled to the session's state file by the child that made them and
unpickled by the next child, lazily: a call loads only the variables its code may read
(`read_names`), and the others are passed on as the same bytes. The trusted process never
touches these bytes.

The state file is saved after the result is out, while the caller reads it. The children of a
session take turns through their worker, which hands a call its request only once the
previous call's save has ended (in an agent loop it has long ended by then) and tells the next
call when a save never finished (`worker._Savers`). Nothing here orders them: the code runs in
this process and owns the session's folder, so a lock or marker it can reach, it can hold,
release or rewrite. The code starts with no descriptor but 0-2 (`/dev/null`), its result pipe
and read-only maps of its inputs and carried variables.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import errno
import io
import json
import math
import mmap
import os
import pickle
import random
import re
import struct
import sys
import tempfile
import time
import traceback
import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import cv2
import matplotlib
import numpy as np
import outputs
import PIL
import wire
from PIL import Image, ImageDraw, ImageEnhance, ImageFilter, ImageFont, ImageOps

matplotlib.use("Agg")  # before pyplot is imported
import matplotlib.pyplot as plt

cv2.setNumThreads(1)

_PRESET_NAMES = ("image", "images", "image_path", "image_paths", "output_dir")
"""Names rebuilt every call; they are carried only when the code rebinds them."""
_DYNAMIC_NAMES = frozenset({"globals", "vars", "eval", "exec", "locals", "dir"})
"""Code that names one of these may reach any variable, so all carried ones are loaded."""
_PILLOW_MAJOR = int(PIL.__version__.split(".")[0])
_RETURN_MODES = ("L", "RGB", "RGBA")
"""Modes a returned image keeps; others are converted to RGB."""


@dataclass
class CallContext:
    """One call's view of its session: the compiled code, its namespace, its carried state."""

    request: wire.RunRequest
    code: types.CodeType | None = None
    syntax_error: str | None = None
    ns: dict[str, Any] = field(default_factory=dict)
    presets: dict[str, Any] = field(default_factory=dict)
    state_index: list[tuple[str, int]] = field(default_factory=list)  # (name, pickle size)
    carried: dict[str, memoryview] | None = None  # the pickles, mapped when first needed
    loaded: set[str] = field(default_factory=set)  # names unpickled into ns
    notes: list[str] = field(default_factory=list)


def prepare(request: wire.RunRequest) -> CallContext:
    """Compile the code and build its namespace, restoring the carried variables it names."""
    ep = CallContext(request)
    tree = None
    try:
        tree = ast.parse(request.code, "<code>")
        ep.code = compile(tree, "<code>", "exec")
    except Exception as exc:  # SyntaxError, ValueError (NUL bytes), RecursionError, ...
        ep.syntax_error = describe(exc)
    os.environ["TMPDIR"] = request.out_dir  # the only writable folder
    tempfile.tempdir = None
    paths = request.image_paths
    images = [
        map_pixels(p, s) for p, s in zip(request.pixel_files, request.image_sizes, strict=True)
    ]
    ep.ns = {
        "__name__": "__main__",
        "__builtins__": builtins,
        "os": os, "sys": sys, "math": math, "re": re, "io": io, "json": json, "random": random,
        "time": time, "np": np, "numpy": np, "cv2": cv2, "plt": plt, "matplotlib": matplotlib,
        "Image": Image, "ImageDraw": ImageDraw, "ImageEnhance": ImageEnhance,
        "ImageFilter": ImageFilter, "ImageFont": ImageFont, "ImageOps": ImageOps,
        "image": images[0] if images else None, "images": list(images),
        "image_path": paths[0] if paths else None, "image_paths": list(paths),
        "output_dir": request.output_dir,
    }  # fmt: skip
    ep.presets = {name: ep.ns[name] for name in _PRESET_NAMES}
    if request.carry:
        read_state(ep)
        carried = {name for name, _ in ep.state_index}
        if tree is not None and carried:
            names = read_names(tree)
            dynamic = names & _DYNAMIC_NAMES or "__dict__" in request.code
            _load_variables(ep, carried if dynamic else carried & names)
    return ep


def map_pixels(path: str, size: list[int]) -> Image.Image:
    """An RGB image over a raw RGBX pixel file, mapped copy-on-write (no copy, no decoding).

    Pillow keeps an RGB image at 4 bytes per pixel, so the file is its own memory layout:
    `Image.frombuffer` maps it as RGBX, and `Image.fromarrow` takes that memory as RGB as it is.
    A copy of a 4000x3000 input costs several times the benchmark's whole heavy call
    (docs/sandbox.md, "Speed"). Before Pillow 13, exporting a mapped image to Arrow crashes the
    process, so older Pillow converts (a copy). The image is read-only: Pillow copies it on the
    first write, and the file never changes.
    """
    width, height = size
    with open(path, "rb") as f:
        buf = mmap.mmap(f.fileno(), width * height * 4, access=mmap.ACCESS_COPY)
    rgbx = Image.frombuffer("RGBX", (width, height), buf, "raw", "RGBX", 0, 1)
    if _PILLOW_MAJOR >= 13:
        return Image.fromarrow(rgbx, "RGB", (width, height))
    return rgbx.convert("RGB")


_STRAIGHT = (
    ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Import, ast.ImportFrom, ast.Delete,
    ast.Pass, ast.Assert, ast.Global, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
)  # fmt: skip
"""Top-level statements that always run to the end or raise (which ends the code)."""


def read_names(tree: ast.Module) -> set[str]:
    """Names the code may read from the previous calls' variables.

    Every name the code reads or deletes, anywhere (function bodies included: they may run at
    any time), except one read only after a statement of the code's straight-line beginning
    (before its first `if`, loop, `try` or `with`) assigned it: that assignment has run by then,
    or an exception ended the code. So `crop = image.crop(...)` then `crop.show()` does not
    load the last call's `crop`. A name bound inside a comprehension counts too (at worst a
    carried variable of that name is loaded for nothing).
    """
    assigned: set[str] = set()
    needed: set[str] = set()
    straight = True
    for stmt in tree.body:
        reads = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)
                 and not isinstance(n.ctx, ast.Store)}  # fmt: skip
        if isinstance(stmt, ast.AugAssign):  # `x += 1` reads x
            reads |= _bound(stmt.target)
        needed |= reads - assigned
        straight = straight and isinstance(stmt, _STRAIGHT)
        if straight:
            assigned |= _assigned(stmt)
    return needed


def _assigned(stmt: ast.stmt) -> set[str]:
    """The top-level names a straight-line statement binds."""
    if isinstance(stmt, ast.Assign):
        return set().union(*(_bound(target) for target in stmt.targets))
    if isinstance(stmt, ast.AnnAssign | ast.AugAssign) and getattr(stmt, "value", None):
        return _bound(stmt.target)
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names if a.name != "*"}
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {stmt.name}
    return set()


def _bound(target: ast.expr) -> set[str]:
    """The names an assignment target binds (`a, *b = ...`; not `a[i]` or `a.x`)."""
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Store)}  # fmt: skip


_INDEX_AT = struct.Struct("<Q")
"""A state file: the variables' pickles back to back, written straight into the file as they
are made; then the index, a pickle of (the saving call's number, [(name, pickle size), ...]);
then where the index starts, in these 8 bytes."""


def read_state(ep: CallContext) -> None:
    """Read the index of the state the session's last save left (its worker has waited for
    that save to end); a damaged or foreign file is noted, and the session starts over."""
    try:
        ep.state_index = _read_index(ep.request.state_path)
    except FileNotFoundError:
        pass
    except Exception as exc:
        ep.notes.append(f"carried variables were lost ({type(exc).__name__}: {exc})"[:300])


def _read_index(path: str) -> list[tuple[str, int]]:
    """A state file's index (`_INDEX_AT`), checked against the file."""
    with open(path, "rb") as f:
        end = f.seek(0, os.SEEK_END) - _INDEX_AT.size
        f.seek(end)
        (start,) = _INDEX_AT.unpack(f.read(_INDEX_AT.size))
        if not 0 <= start <= end:
            raise ValueError("the state file has no index")
        f.seek(start)
        call, index = pickle.load(f)
    index = [(str(name), int(size)) for name, size in index]
    if type(call) is not int or min((size for _, size in index), default=0) < 0:
        raise ValueError("the state file's index is damaged")
    if sum(size for _, size in index) != start:
        raise ValueError("the state file's index does not match its size")
    return index


def _carried(ep: CallContext) -> dict[str, memoryview]:
    """The state's pickles, mapped (not copied) when first needed: a call that reads no carried
    variable never maps them before it answers."""
    if ep.carried is None:
        ep.carried, offset = {}, 0
        with open(ep.request.state_path, "rb") as f:
            data = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
        for name, size in ep.state_index:
            ep.carried[name] = data[offset : offset + size]
            offset += size
    return ep.carried


def _load_variables(ep: CallContext, wanted: Iterable[str]) -> None:
    failed = []
    for name in wanted:
        try:
            ep.ns[name] = pickle.loads(_carried(ep)[name])
            ep.loaded.add(name)
        except BaseException:
            failed.append(name)
    if failed:
        ep.notes.append(f"could not restore carried variables: {', '.join(failed)[:200]}")


def _to_save(ep: CallContext) -> dict[str, Any]:
    """The namespace entries worth carrying: not modules or untouched presets."""
    return {
        name: value
        for name, value in ep.ns.items()
        if not name.startswith("__")
        and not isinstance(value, types.ModuleType)
        and ep.presets.get(name, _MISSING) is not value
    }


def execute(ep: CallContext) -> list[wire.Bytes]:
    """Run the code and return the result frame (text, error, notes, raw images), in pieces."""
    request, ns, notes = ep.request, ep.ns, ep.notes
    out = _CappedText(request.max_stdout_chars)
    shown: list[Image.Image] = []
    before = dict(ns)
    refused: list[str] = []  # images over the pixel limit: the call fails with the reason
    outputs.capture_shows(shown, request.max_image_pixels, refused)
    clamped: list[str] = []
    if request.clamp_crops:
        outputs.clamp_crops(request.min_crop_size, clamped)
    clamp = request.min_crop_size if request.clamp_crops else None
    outputs.track_crops(ep.presets["images"], list(request.image_paths), clamp)
    sys.stdout = sys.stderr = out
    start = time.time()
    error = ep.syntax_error
    try:
        if ep.code is not None:
            exec(ep.code, ns)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            error = f"SystemExit: the code called exit({exc.code!r})"
    except BaseException as exc:
        error = describe(exc)
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    stdout = out.text()
    try:  # the code may have moved anywhere; relative paths and /mnt/data mean its folder
        os.chdir(request.out_dir)
    except OSError as exc:
        error = error or f"the code's folder is gone: {describe(exc)}"
    notes += outputs.crop_notes(clamped)
    try:
        images = shown + outputs.file_images(stdout, ns, before, start, request, refused, notes)
    except BaseException as exc:
        images, error = shown, error or f"collecting images failed: {describe(exc)}"
    error = error or (refused[0] if refused else None)
    if len(images) > request.max_images:
        notes.append(
            f"{len(images)} images were returned; only the first {request.max_images} were kept"
        )
        images = images[: request.max_images]
    metas, blobs = _hand_over(images, request)
    header = {"stdout": stdout, "stdout_chars": out.total, "error": error, "notes": notes}
    return wire.frame_parts({**header, "images": metas}, blobs)


def _hand_over(
    images: list[Image.Image], request: wire.RunRequest
) -> tuple[list[dict[str, Any]], list[bytes]]:
    """Each image's description, with its raw pixels in `wire.image_file` or else as a blob.

    The file is read by the trusted process directly (docs/sandbox.md, "Speed"); the blob is
    the fallback where the file cannot be written: the session's quota or the file size limit
    is reached, or the code made the name or took away the folder.
    """
    metas, blobs = [], []
    for index, img in enumerate(images):
        origin = outputs.origin_meta(img)
        img = img if img.mode in _RETURN_MODES else img.convert("RGB")
        data = img.tobytes()
        meta = wire.image_meta(img.mode, img.width, img.height)
        if origin is not None:
            meta["crop"] = origin
        if _write_new_file(wire.image_file(request.out_dir, request.call, index), data):
            meta["file"] = True
        else:
            blobs.append(data)
        metas.append(meta)
    return metas, blobs


def _write_new_file(path: str, data: wire.Bytes) -> bool:
    """Write `data` to a file that did not exist; False (and no file) where that fails."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError:
        return False
    try:
        wire.write_all(fd, data)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return False
    finally:
        os.close(fd)


REHEARSAL = (
    "crop = image.crop((0, 0, 2, 2))\n"
    "small = crop.resize((1, 1))\n"
    "small.show()\n"
    "print(image_path, small.size)\n"
)
"""A call in miniature: crop, resize, show and print, like the model's usual first call."""


def rehearse(scratch: str) -> list[wire.Bytes]:
    """Run `REHEARSAL` on a 2x2 image through `prepare` and `execute`, and return its frame.

    A spare runs this while it waits for its request (`worker.warm_up`). The spare is a fresh
    fork, so the first write to each page it shares with the template (a reference count, a
    malloc pool, a namespace dict) copies that page; the rehearsal makes those copies before
    the request, so the call faults only on what it alone touches (docs/sandbox.md, "Speed").
    Its request and result cross a pipe as a call's do. It holds no session's data (its image
    is 16 zero bytes in a memfd, its folder a new one in `scratch`, removed after it: the
    worker's code folder, inside the sandbox's root, so that a spare killed mid-rehearsal
    leaves nothing outside it), and it undoes its patches of `Image.show`, `plt.show` and
    `Image.crop` and its change of folder.
    """
    pixels = os.memfd_create("beacon-rehearsal")
    home = os.getcwd()
    try:
        with tempfile.TemporaryDirectory(prefix="rehearsal-", dir=scratch) as folder:
            os.write(pixels, bytes(2 * 2 * 4))
            request = wire.RunRequest(
                session="rehearsal", code=REHEARSAL, call=1, uid=None,
                image_paths=[os.path.join(folder, "rehearsal.png")],
                pixel_files=[f"/proc/self/fd/{pixels}"], image_sizes=[[2, 2]],
                out_dir=folder, output_dir=folder,
                state_path=os.path.join(folder, "vars.pkl"), carry=True,
                timeout_s=1.0, cpu_s=1.0, memory_bytes=0, max_file_bytes=0, max_processes=0,
                max_stdout_chars=1000, max_images=1, max_image_pixels=4, max_state_bytes=0,
                max_result_bytes=1 << 16, clamp_crops=True, min_crop_size=1,
            )  # fmt: skip
            read_end, write_end = os.pipe()  # both ways hold far less than a pipe's 64 KB
            try:
                wire.write_all(write_end, wire.encode_frame(request.to_header()))
                ep = prepare(wire.read_request(read_end))
                parts = execute(ep)
                wire.write_parts(write_end, parts)
                return [wire.read_exact(read_end, sum(len(part) for part in parts))]
            finally:
                os.close(read_end)
                os.close(write_end)
    finally:
        os.close(pixels)
        os.chdir(home)
        outputs.restore()


class _CappedText(io.TextIOBase):
    """A text stream that keeps the first `limit` characters and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.limit, self.total, self.parts, self.kept = limit, 0, [], 0

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        s = str(s)
        self.total += len(s)
        room = self.limit - self.kept
        if room > 0:
            self.parts.append(s[:room])
            self.kept += min(room, len(s))
        return len(s)

    def text(self) -> str:
        return "".join(self.parts)


def save_state(ep: CallContext) -> None:
    """Write the variables for the next call: unloaded ones as they were, the rest re-pickled.

    Each pickle goes straight into the file as it is made. Unpicklable values (modules,
    functions and classes the code defined) are skipped; once the file passes
    max_state_bytes, nothing is carried.
    """
    new = _to_save(ep)
    kept = [name for name, _ in ep.state_index if name not in ep.loaded and name not in new]
    carried = _carried(ep) if kept else {}
    index: list[tuple[str, int]] = []
    over = False  # past the file size limit, which is at least max_state_bytes
    tmp = ep.request.state_path + ".tmp"
    with open(tmp, "wb", buffering=0) as f:  # unbuffered: a failed pickle is cut off exactly
        for name in kept:
            f.write(carried[name])
            index.append((name, len(carried[name])))
        for name, value in new.items():
            start = f.tell()
            try:
                pickle.dump(value, f, protocol=5)
            except BaseException as exc:  # what does not pickle is not carried
                f.seek(start)
                f.truncate()
                over = isinstance(exc, OSError) and exc.errno == errno.EFBIG
                if over:
                    break
                continue
            index.append((name, f.tell() - start))
        if over or f.tell() > ep.request.max_state_bytes:
            f.seek(0)
            f.truncate()
            index = []
        start = f.tell()
        pickle.dump((ep.request.call, index), f, protocol=5)
        f.write(_INDEX_AT.pack(start))
    os.replace(tmp, ep.request.state_path)


_MISSING = object()


def describe(exc: BaseException) -> str:
    """'Type: message (line N)', N being the line of the model's code that raised it."""
    line = getattr(exc, "lineno", None) if isinstance(exc, SyntaxError) else None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == "<code>":
            line = lineno
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, MemoryError):
        text += " (the memory limit was reached)"
    return (text[:1500] + (f" (line {line})" if line else "")).strip()
