"""Image loading and the run's content-addressed image store.

Trajectories refer to images by the SHA-256 of their pixels, so eight rollouts of one
prompt that return the same crop store it once, and a trajectory stays one small JSON line.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import struct
import threading
import weakref
import zlib
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
from isal import isal_zlib
from PIL import Image

from beacon.files import FileRefused, read_file
from beacon.types import ImageSource

T = TypeVar("T")
S = TypeVar("S")

MAX_IMAGE_PIXELS = 178_956_970
"""Refuse larger images (PIL's own decompression-bomb limit, made an error instead of a warning)."""


class ImageError(ValueError):
    """An image could not be read: missing file, undecodable bytes, or too many pixels."""


def load_image(source: ImageSource, max_pixels: int = MAX_IMAGE_PIXELS) -> Image.Image:
    """Decode `source` (PIL image, path, raw bytes or a base64 string) to an RGB PIL image.

    Raises ImageError with the reason; callers record it for the sample instead of crashing.
    A PIL source is copied: episodes of one item run in threads, and a PIL image is not safe to
    save from two threads at once (`save` keeps its encoder settings on the image object).
    """
    if isinstance(source, Image.Image):
        image = source.copy()
    else:
        data = _read_bytes(source)
        try:
            image = Image.open(io.BytesIO(data))
            width, height = image.size
            if width * height > max_pixels:
                raise ImageError(
                    f"image has {width}x{height} = {width * height} pixels, over the limit of "
                    f"{max_pixels}; refusing it as a possible decompression bomb"
                )
            image.load()
        except ImageError:
            raise
        except Exception as exc:  # PIL raises many types for corrupt data
            raise ImageError(f"cannot decode image: {type(exc).__name__}: {exc}") from exc
    if image.mode != "RGB":
        image = image.convert("RGB")
    return image


def _read_bytes(source: str | Path | bytes) -> bytes:
    """Raw bytes as they are, a path through `read_file` (a regular file, size-capped: a path may
    come from a dataset row or a client), else a long string as base64."""
    if isinstance(source, bytes):
        return source
    text = str(source)
    if isinstance(source, str) and not os.path.exists(text) and len(text) > 256:
        try:
            return base64.b64decode(text, validate=True)
        except ValueError as exc:
            raise ImageError("string is neither an existing path nor valid base64") from exc
    try:
        return read_file(text)
    except FileRefused as exc:
        raise ImageError(f"cannot read image file {text!r}: {exc}") from exc


def encode_png(
    image: Image.Image, compress_level: int = 1, pixels: np.ndarray | None = None
) -> bytes:
    """PNG bytes at a fast compression level (level 6 costs more than the image work itself).

    8-bit L, RGB and RGBA images without PNG metadata (ICC profile, transparency) are written by
    `_sub_filtered_png` (from `pixels`, the image's `np.asarray`, if the caller has it), which
    takes a third to a tenth of the time of OpenCV's or Pillow's public encoders; the rest by
    Pillow, which also writes that metadata.
    """
    if _plain_png(image):
        return _sub_filtered_png(image, compress_level, pixels)
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=compress_level)
    return buf.getvalue()


_PNG_COLOR_TYPE = {"L": 0, "RGB": 2, "RGBA": 6}  # PNG's colour type of each 8-bit mode
_PNG_INFO = ("icc_profile", "transparency", "default_image")  # `info` entries PIL's writer reads
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _plain_png(image: Image.Image) -> bool:
    """Whether `_sub_filtered_png` writes this image: 8-bit L, RGB or RGBA, no PNG metadata."""
    plain = not any(name in image.info for name in _PNG_INFO)
    return image.mode in _PNG_COLOR_TYPE and plain and bool(image.width and image.height)


def _sub_filtered_png(
    image: Image.Image, compress_level: int, pixels: np.ndarray | None = None
) -> bytes:
    """A standard PNG with filter 1 ("Sub") on every row, deflated by ISA-L (`isal`).

    Sub (each byte minus the same channel's byte to its left) is one numpy subtraction, and
    ISA-L's level 1 writes zlib's stream format several times faster than zlib. Pillow's
    writer tries all five filters on every row; OpenCV's, told to use Sub alone with zlib's
    RLE strategy, still deflates with zlib. `python benchmarks/png_encode.py` (level 1, 2-core
    VM): a 448x448 `synth_demo` image 2.4 ms here against 5.7 (OpenCV) and 20.4 (Pillow), a
    1024x768 chart 0.6 against 4.6 and 16.2, a 1024x768 photo 7.2 against 20.6 and 68.7, for
    files within 4% of Pillow's (the chart's few KB aside). numpy and ISA-L run without the
    GIL. Levels above ISA-L's highest (3) compress at 3.
    """
    if pixels is None:
        pixels = np.asarray(image)
    height, width = image.height, image.width
    channels = len(image.getbands())
    rows = pixels.reshape(height, width * channels)
    filtered = np.empty((height, width * channels + 1), dtype=np.uint8)
    filtered[:, 0] = 1  # the filter-type byte of each row
    filtered[:, 1 : 1 + channels] = rows[:, :channels]
    np.subtract(rows[:, channels:], rows[:, :-channels], out=filtered[:, 1 + channels :])
    data = isal_zlib.compress(filtered, min(compress_level, isal_zlib.ISAL_BEST_COMPRESSION))
    header = struct.pack(">IIBBBBB", width, height, 8, _PNG_COLOR_TYPE[image.mode], 0, 0, 0)
    return b"".join(
        (_PNG_SIGNATURE, _png_chunk(b"IHDR", header), _png_chunk(b"IDAT", data),
         _png_chunk(b"IEND", b""))
    )  # fmt: skip


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(data, zlib.crc32(kind))
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


class PerImage(Generic[T]):
    """`compute(image)` memoized for as long as the PIL image lives; an entry goes with its image.

    Keyed by `id(image)` (PIL images are unhashable) and guarded by a weak reference, so a new
    image that reuses a dead one's id never gets its value. The memo assumes an image is not
    changed in place once computed on, which holds for Beacon's: `load_image` copies, and the
    sandbox returns new images for every call. A caller asking while another thread computes
    the same image's value waits for that value: an episode's request and its trajectory's
    record ask for the same image's key at the same moment (`beacon.agent.loop`).
    """

    def __init__(self, compute: Callable[[Image.Image], T]) -> None:
        self._compute = compute
        self._values: dict[int, tuple[weakref.ref, T]] = {}
        self._running: dict[int, tuple[Image.Image, _Pending[T]]] = {}
        # reentrant: a garbage collection inside the lock may run `_forget` on this thread
        self._lock = threading.RLock()

    def __call__(self, image: Image.Image, compute: Callable[[Image.Image], T] | None = None) -> T:
        """The image's value, computed by `compute` (default: the memo's own) if not known yet;
        `compute` must give what the memo's own would."""
        key = id(image)
        with self._lock:
            entry = self._values.get(key)
            if entry is not None and entry[0]() is image:
                return entry[1]
            running = self._running.get(key)
            if running is None or running[0] is not image:
                running = None
                self._running[key] = (image, mine := _Pending())
        if running is not None:
            return running[1].wait()
        try:
            value = (compute or self._compute)(image)
        except BaseException as exc:
            with self._lock:
                del self._running[key]
            mine.finish(error=exc)
            raise
        ref = weakref.ref(image, lambda _, key=key: self._forget(key))
        with self._lock:
            del self._running[key]
            self._values[key] = (ref, value)
        mine.finish(value)
        return value

    def _forget(self, key: int) -> None:
        with self._lock:
            entry = self._values.get(key)
            if entry is not None and entry[0]() is None:
                del self._values[key]


class _Pending(Generic[T]):
    """A computation under way that other threads wait for (`PerImage`, `Recent`): a plain lock
    held until it ends. A `Future` per computation cost ~3% of the harness's time with 64
    episodes in flight, mostly building its `Condition`, for a wait that is rare."""

    def __init__(self) -> None:
        self._done = threading.Lock()
        self._done.acquire()
        self._value: Any = None
        self._error: BaseException | None = None

    def finish(self, value: Any = None, error: BaseException | None = None) -> None:
        self._value, self._error = value, error
        self._done.release()

    def wait(self) -> T:
        with self._done:
            pass
        if self._error is not None:
            raise self._error
        return self._value


def image_key(image: Image.Image, pixels: np.ndarray | None = None) -> str:
    """SHA-256 of an image's mode, size and raw pixels (`tobytes()`): equal images get equal
    keys. `pixels`: the image's `np.asarray` (the same bytes for L, RGB and RGBA), when the
    caller has it anyway (`png_bytes`), hashed as it is."""
    digest = hashlib.sha256(f"{image.mode}:{image.width}x{image.height}:".encode())
    digest.update(pixels.data if pixels is not None else image.tobytes())
    return digest.hexdigest()


pixel_key: PerImage[str] = PerImage(image_key)
"""`image_key(image)`, hashed once per live image: the store and `png_bytes` both need it."""


class Recent(Generic[S, T]):
    """`compute(source)` for recently seen sources, by `key(source)`, up to `budget` bytes as
    measured by `size` (oldest out first). A source is an image (keyed by its pixels) or an
    image store's key (training's `PixelCache`).

    The rollouts of one prompt (a GRPO group, eval's tool and notool runs of an item) each load
    their own copy of its image, and each copy's first use would compute again (a PNG encode is
    ~1-7 ms for a 1024x768 image, `benchmarks/png_encode.py`, ten times that at 4K). Callers
    that ask for a key being computed wait for that one computation: the eight rollouts of a
    group ask for their image at the same moment.
    """

    def __init__(
        self,
        compute: Callable[[S], T],
        key: Callable[[S], Hashable],
        size: Callable[[T], int],
        budget: int,
    ) -> None:
        self._compute, self._key, self._sizeof, self.budget = compute, key, size, budget
        self._values: OrderedDict[Hashable, T] = OrderedDict()
        self._running: dict[Hashable, _Pending[T]] = {}
        self._size = 0
        self._lock = threading.Lock()

    def __call__(self, source: S) -> T:
        return self.get(self._key(source), lambda: self._compute(source))

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The value kept for `key`, else `compute()`'s (kept)."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
            running = self._running.get(key)
            if running is None:
                self._running[key] = mine = _Pending()
        if running is not None:
            return running.wait()
        try:
            value = compute()
        except BaseException as exc:
            with self._lock:
                del self._running[key]
            mine.finish(error=exc)
            raise
        with self._lock:
            del self._running[key]
            self._values[key] = value
            self._size += self._sizeof(value)
            while self._size > self.budget:
                self._size -= self._sizeof(self._values.popitem(last=False)[1])
        mine.finish(value)
        return value

    def clear(self) -> None:
        """Drop every kept value (a computation under way still finishes, and is kept)."""
        with self._lock:
            self._values.clear()
            self._size = 0


def _png_key(image: Image.Image, key: str | None = None) -> tuple:
    """The pixels (`key`, else the image's `pixel_key`) and the `info` entries PNG's writer
    reads: equal keys, equal bytes."""
    return (key or pixel_key(image), *(repr(image.info.get(name)) for name in _PNG_INFO))


_recent_pngs: Recent[Image.Image, bytes] = Recent(encode_png, _png_key, len, budget=256 << 20)


def _png(image: Image.Image) -> bytes:
    """`encode_png(image)`, kept for equal pixels and PNG metadata seen recently (`Recent`).

    An image neither keyed nor encoded yet (every new episode's) is packed into bytes once
    (`np.asarray`) for both its key and its PNG: packing holds the GIL, ~1 ms for 1024x768.
    """
    packed: list[np.ndarray] = []

    def key_from_pixels(image: Image.Image) -> str:
        if not _plain_png(image):
            return image_key(image)
        packed.append(np.asarray(image))
        return image_key(image, packed[0])

    key = _png_key(image, pixel_key(image, key_from_pixels))
    pixels = packed[0] if packed else None
    return _recent_pngs.get(key, lambda: encode_png(image, pixels=pixels))


png_bytes: PerImage[bytes] = PerImage(_png)
"""`encode_png(image)`, encoded once per live image and reused for equal pixels seen recently.
The image store and the openai engine's requests share it: an episode's image would otherwise
be encoded once for the store and once more for the first request that sends it, per episode."""


class ImageStore:
    """Content-addressed PNG files under `root`: `put` returns a key, `get` loads it back.

    Safe for concurrent use from threads and processes: files are written to a temporary name
    and renamed into place, so a reader never sees half a file.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._keys: PerImage[str] = PerImage(self._put)

    def path(self, key: str) -> Path:
        """Where the PNG of `key` lives (two-character fan-out folders keep directories small)."""
        return self.root / key[:2] / f"{key}.png"

    def put(self, image: Image.Image) -> str:
        """Store `image` once; the key hashes its pixels, so the PNG is encoded only when new.

        The key is remembered while the image lives, so storing it ahead (the agent loop does
        while a sandbox session opens) makes the later `put` free.
        """
        return self._keys(image)

    def _put(self, image: Image.Image) -> str:
        key = pixel_key(image)
        path = self.path(key)
        if path.exists():
            return key
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(png_bytes(image))
        os.replace(tmp, path)
        return key

    def get(self, key: str) -> Image.Image:
        """The stored image of `key`, decoded (and checked) by `load_image`."""
        return load_image(self.path(key))

    def header(self, key: str) -> Image.Image:
        """The stored image with only its header read: size and mode, no pixels (the file is
        closed again, so its pixels cannot be loaded from it). What counting an image's tokens
        needs: encoding the demo's 6,200 SFT trajectories spent 38 of its 55 s decoding PNGs
        whose pixels it never used."""
        try:
            with Image.open(self.path(key)) as image:
                return image
        except OSError as exc:
            raise ImageError(f"cannot read stored image {key!r}: {exc}") from exc
