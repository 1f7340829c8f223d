"""The sandbox wire format: length-prefixed JSON headers followed by raw byte blobs.

Everything that crosses from the jail to the trusted process goes through `decode_frame` /
`read_frame`, which check every size before allocating and never unpickle or evaluate anything:

    frame  = u32 header_len (little endian) | header (UTF-8 JSON object) | blob_0 | blob_1 | ...
    header = {..., "blobs": [len_0, len_1, ...]}

Images travel as raw pixels (`image_meta` + `tobytes()`): no encoding cost on the way out and a
check of `width * height * channels == size` on the way in. A child leaves each returned image
in a file of its session's folder (`image_file`; its description says `"file": true`), which
the trusted side reads once and removes: one copy each way instead of three through the
worker's pipes. Where the file cannot be written (the session's quota is full) the pixels
follow the header as a blob.

This module uses only the standard library because it is also copied into the jail next to
`worker.py`.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from dataclasses import dataclass, fields
from typing import Any

_LEN = struct.Struct("<I")

IMAGE_CHANNELS = {"L": 1, "RGB": 3, "RGBA": 4}
"""Pixel modes allowed on the wire and their bytes per pixel."""


class WireError(ValueError):
    """A frame broke the format or a limit: wrong length, bad JSON, too many or too large blobs."""


@dataclass(frozen=True)
class FrameLimits:
    """The most a reader accepts in one frame."""

    max_header_bytes: int = 1 << 20  # JSON header size
    max_blobs: int = 64  # number of blobs
    max_total_bytes: int = 1 << 30  # all blobs together


@dataclass(frozen=True)
class RunRequest:
    """What the trusted side asks a worker to run: one call of one session, with its limits.

    Paths are host paths unless named "as the code sees it". Sent as the `request` field of a
    {"op": "run"} frame; `from_header` rebuilds it and refuses unknown or missing fields.
    """

    session: str  # the session's key (its folder name)
    code: str  # the code to run, after repair
    call: int  # number of this call in the session, from 1
    uid: int | None  # the session's own uid, or None when the sandbox cannot drop root
    image_paths: list[str]  # input images as the code sees them
    pixel_files: list[str]  # the inputs' raw RGBX pixels, written by the trusted side
    image_sizes: list[list[int]]  # (width, height) of each input
    out_dir: str  # the code's working and output folder
    output_dir: str  # the same folder as the code sees it
    state_path: str  # carried variables
    carry: bool  # carry variables to the session's next call
    timeout_s: float  # wall-clock limit of this call (what code repair left of timeout_s)
    cpu_s: float
    memory_bytes: int
    max_file_bytes: int
    max_processes: int
    max_stdout_chars: int
    max_images: int
    max_image_pixels: int
    max_state_bytes: int
    max_result_bytes: int
    clamp_crops: bool  # clamp Image.crop boxes into the image at run time
    min_crop_size: int  # smallest side a clamped crop box gets

    def to_header(self) -> dict[str, Any]:
        """The {"op": "run"} header; its lists are this request's own (it is only encoded)."""
        return {"op": "run", "request": dict(vars(self))}

    @classmethod
    def from_header(cls, header: dict[str, Any]) -> RunRequest:
        """The request inside a {"op": "run"} header; ValueError if its fields do not match."""
        body = header.get("request")
        names = {f.name for f in fields(cls)}
        if not isinstance(body, dict) or set(body) != names:
            raise ValueError(f"a run request needs exactly the fields {sorted(names)}")
        return cls(**body)


COLD = "--cold"
"""The worker's last argument when `SandboxConfig.speed_tricks` is off: no `gc.freeze` before
the template forks, no warm-up in the spares (`worker.warm_up`)."""
REQUEST_LIMITS = FrameLimits(max_header_bytes=64 << 20, max_blobs=0, max_total_bytes=0)
"""A request frame (its code is under `SandboxConfig.max_code_chars`): a header, no blobs."""


def read_request(fd: int) -> RunRequest:
    """The run request waiting on `fd` (a spare's control pipe, or the rehearsal's)."""
    return RunRequest.from_header(read_frame(fd, REQUEST_LIMITS).header)


_PREALLOCATE_BYTES = 16 << 20
"""Reads up to this size go straight into one buffer; longer ones grow as the bytes arrive, so
a peer that announces a huge blob and sends nothing does not make the reader allocate it."""

Bytes = bytes | bytearray | memoryview


@dataclass
class Frame:
    header: dict[str, Any]
    blobs: list[Bytes]  # views into the frame's buffer where that saves a copy


def frame_parts(header: dict[str, Any], blobs: list[Bytes] | tuple[Bytes, ...] = ()) -> list[Bytes]:
    """`encode_frame` as pieces, for writing large blobs without joining them first."""
    head = json.dumps({**header, "blobs": [len(b) for b in blobs]}).encode()
    return [_LEN.pack(len(head)) + head, *blobs]


def encode_frame(header: dict[str, Any], blobs: list[Bytes] | tuple[Bytes, ...] = ()) -> bytes:
    """Serialize `header` plus `blobs`; the blob lengths are added to the header."""
    return b"".join(frame_parts(header, blobs))


def write_frame(
    fd: int, header: dict[str, Any], blobs: list[Bytes] | tuple[Bytes, ...] = ()
) -> None:
    """Write one frame to a blocking descriptor, each blob from where it lies (no joined copy)."""
    write_parts(fd, frame_parts(header, blobs))


def write_parts(fd: int, parts: list[Bytes]) -> None:
    """Write `parts` one after the other to a blocking descriptor, in one `writev` where they fit.

    One write wakes the reader once: written piece by piece, a small frame costs the reader a
    wake-up (and on a busy machine a context switch) per piece.
    """
    views = [memoryview(part) for part in parts if len(part)]
    while views:
        sent = os.writev(fd, views)
        while views and sent >= len(views[0]):
            sent -= len(views.pop(0))
        if sent:
            views[0] = views[0][sent:]


def parse_header(data: bytes, limits: FrameLimits) -> tuple[dict[str, Any], list[int]]:
    """Decode a JSON header and check its blob list against `limits`."""
    try:
        header = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireError(f"header is not valid JSON: {exc}") from exc
    except RecursionError as exc:  # a forged header of deeply nested arrays
        raise WireError("header is nested too deeply") from exc
    if not isinstance(header, dict):
        raise WireError(f"header must be a JSON object, got {type(header).__name__}")
    sizes = header.get("blobs")
    if not isinstance(sizes, list) or not all(type(s) is int and s >= 0 for s in sizes):
        raise WireError("header field 'blobs' must be a list of non-negative integers")
    if len(sizes) > limits.max_blobs:
        raise WireError(f"frame has {len(sizes)} blobs, over the limit of {limits.max_blobs}")
    if sum(sizes) > limits.max_total_bytes:
        raise WireError(
            f"frame carries {sum(sizes)} bytes, over the limit of {limits.max_total_bytes}"
        )
    return header, sizes


def decode_frame(data: Bytes, limits: FrameLimits) -> Frame:
    """Parse one complete frame held in memory; trailing or missing bytes are an error.

    The blobs are views into `data`.
    """
    if len(data) < _LEN.size:
        raise WireError(f"frame of {len(data)} bytes is shorter than its length prefix")
    (head_len,) = _LEN.unpack_from(data)
    if head_len > limits.max_header_bytes:
        raise WireError(
            f"header of {head_len} bytes is over the limit of {limits.max_header_bytes}"
        )
    start = _LEN.size + head_len
    if start > len(data):
        raise WireError("frame ends inside its header")
    header, sizes = parse_header(data[_LEN.size : start], limits)
    if start + sum(sizes) != len(data):
        raise WireError(f"frame announces {sum(sizes)} blob bytes but carries {len(data) - start}")
    view, blobs = memoryview(data), []
    for size in sizes:
        blobs.append(view[start : start + size])
        start += size
    return Frame(header, blobs)


def read_frame(fd: int, limits: FrameLimits, deadline: float | None = None) -> Frame:
    """Read one frame from a file descriptor, raising TimeoutError after `deadline` (monotonic).

    EOF before a whole frame raises EOFError; the caller decides whether the peer died.
    """
    (head_len,) = _LEN.unpack(read_exact(fd, _LEN.size, deadline))
    if head_len > limits.max_header_bytes:
        raise WireError(
            f"header of {head_len} bytes is over the limit of {limits.max_header_bytes}"
        )
    header, sizes = parse_header(read_exact(fd, head_len, deadline), limits)
    return Frame(header, [read_exact(fd, size, deadline) for size in sizes])


def read_exact(fd: int, size: int, deadline: float | None = None) -> bytearray:
    """Read exactly `size` bytes, waiting at most until `deadline` (time.monotonic)."""
    buf = bytearray(min(size, _PREALLOCATE_BYTES))
    got = 0
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    while got < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                raise TimeoutError(
                    f"no data from the peer within the deadline ({got}/{size} bytes)"
                )
        if got == len(buf):
            buf.extend(bytes(min(size - got, len(buf))))  # at most doubles what arrived
        with memoryview(buf) as view:
            count = os.readv(fd, [view[got:]])
        if not count:
            raise EOFError(f"peer closed the stream after {got} of {size} bytes")
        got += count
    return buf


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to a blocking file descriptor."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def image_file(folder: str, call: int, index: int) -> str:
    """Where a child leaves the pixels of image `index` returned by call number `call`.

    Both sides derive the name from the request; the trusted side never opens a name the
    child wrote.
    """
    return os.path.join(folder, f".beacon-image-{call}-{index}")


def image_meta(mode: str, width: int, height: int) -> dict[str, Any]:
    return {"mode": mode, "width": width, "height": height}


def check_image_meta(meta: Any, blob_size: int, max_pixels: int) -> tuple[str, int, int]:
    """Validate one image description against its blob; returns (mode, width, height)."""
    if not isinstance(meta, dict):
        raise WireError("image description must be an object")
    mode, width, height = meta.get("mode"), meta.get("width"), meta.get("height")
    if mode not in IMAGE_CHANNELS:
        raise WireError(f"image mode {mode!r} is not one of {sorted(IMAGE_CHANNELS)}")
    if type(width) is not int or type(height) is not int or width < 1 or height < 1:
        raise WireError(f"image size {width!r}x{height!r} is not a positive integer pair")
    if width * height > max_pixels:
        raise WireError(
            f"image of {width}x{height} pixels is over the limit of {max_pixels} pixels"
        )
    expected = width * height * IMAGE_CHANNELS[mode]
    if blob_size != expected:
        raise WireError(f"{mode} image of {width}x{height} needs {expected} bytes, got {blob_size}")
    return mode, width, height


def _reject_constant(name: str) -> None:
    raise ValueError(f"non-standard JSON constant {name}")
