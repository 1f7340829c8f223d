"""Input images as a session stores them: an encoded copy for `image_path`, and raw pixels.

The raw RGBX pixels are what each call maps as `image` (see `episode.py`), so no process that
serves other sessions ever decodes or holds them. Sizes are checked against the pixel limit
before anything is decoded (decompression bombs).
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

from PIL import Image

from beacon.images import ImageError
from beacon.types import ImageSource

PIL_INPUT_EXT = ".bmp"
"""The extension of an input given as a PIL image (stored as uncompressed BMP, see below)."""


@dataclasses.dataclass(frozen=True)
class InputHeader:
    """What a session shows of an input before storing it: its file extension and size."""

    ext: str
    size: tuple[int, int]


@dataclasses.dataclass(frozen=True)
class SessionInput(InputHeader):
    """One input image as the session stores it: an encoded copy and its raw RGBX pixels."""

    data: bytes
    pixels: bytes

    @classmethod
    def of(cls, source: ImageSource, max_pixels: int) -> SessionInput:
        data, ext, size = _encoded_copy(source, max_pixels)
        image = source if isinstance(source, Image.Image) else _decode(data)
        rgb = image if image.mode == "RGB" else image.convert("RGB")
        return cls(ext=ext, size=size, data=data, pixels=rgb.tobytes("raw", "RGBX"))


def describe_input(source: ImageSource, max_pixels: int) -> InputHeader:
    """The header of an input, checked against the pixel limit, without encoding a PIL image
    (what a deferred session needs at once; `SessionInput.of` does the rest later)."""
    if isinstance(source, Image.Image):
        _check_pixels(source.size, max_pixels)
        return InputHeader(PIL_INPUT_EXT, source.size)
    _, ext, size = _encoded_copy(source, max_pixels)
    return InputHeader(ext, size)


def _encoded_copy(source: ImageSource, max_pixels: int) -> tuple[bytes, str, tuple[int, int]]:
    """Encoded bytes, file extension and size of an input image, checked for decompression bombs.

    Paths and bytes are copied as they are (only the header is read). PIL images are written as
    uncompressed BMP: 25 ms for 4000x3000 where PNG even at level 1 takes a second.
    """
    if isinstance(source, Image.Image):
        _check_pixels(source.size, max_pixels)
        buf = io.BytesIO()
        (source if source.mode == "RGB" else source.convert("RGB")).save(buf, format="BMP")
        return buf.getvalue(), PIL_INPUT_EXT, source.size
    data = source if isinstance(source, bytes) else _read_file(source)
    try:
        with Image.open(io.BytesIO(data)) as img:
            size, fmt = img.size, (img.format or "png").lower()
    except Exception as exc:  # PIL raises many types for corrupt data
        raise ImageError(f"cannot decode input image: {type(exc).__name__}: {exc}") from exc
    _check_pixels(size, max_pixels)
    return data, "." + {"jpeg": "jpg"}.get(fmt, fmt), size


def _decode(data: bytes) -> Image.Image:
    """Decode an input image (its size was already checked against the pixel limit)."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            return img.copy()
    except Exception as exc:  # PIL raises many types for corrupt data
        raise ImageError(f"cannot decode input image: {type(exc).__name__}: {exc}") from exc


def _read_file(path: str | Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ImageError(f"cannot read input image {str(path)!r}: {exc.strerror}") from exc


def _check_pixels(size: tuple[int, int], max_pixels: int) -> None:
    if size[0] * size[1] > max_pixels:
        raise ImageError(
            f"input image of {size[0]}x{size[1]} pixels is over the limit of {max_pixels} "
            "(a possible decompression bomb); raise SandboxConfig.max_input_pixels to allow it"
        )
