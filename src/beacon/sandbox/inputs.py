"""Input images as a session stores them: an encoded copy for `image_path`, and raw pixels.

The raw RGBX pixels are what each call maps as `image` (see `child.py`), so no process that
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
"""The extension of an input given as a PIL image: stored as uncompressed BMP, which Pillow
writes about 20 times faster than PNG at level 1."""
_BMP_HEADER_BYTES = 54
"""File and info headers of a 24-bit BMP (no palette), as Pillow writes it."""


@dataclasses.dataclass(frozen=True)
class InputHeader:
    """What a session shows of an input before storing it: its file extension and size."""

    ext: str
    size: tuple[int, int]


@dataclasses.dataclass(frozen=True)
class SessionInput(InputHeader):
    """One input image as the session stores it: an encoded copy and its raw RGBX pixels."""

    image: Image.Image
    """The pixels, in RGB: never the caller's own object. `store` saves it, and `save` sets
    attributes on the image it saves (`encoderinfo`), which the engine's PNG encoder may be
    using on the caller's image from another thread at the same moment."""
    data: bytes | None
    """The encoded bytes of a path or bytes input, copied as they are; None for a PIL input,
    whose copy is written as BMP."""

    @classmethod
    def of(cls, source: ImageSource, max_pixels: int) -> SessionInput:
        if isinstance(source, Image.Image):
            _check_pixels(source.size, max_pixels)
            data, ext = None, PIL_INPUT_EXT
            image = source.copy() if source.mode == "RGB" else source
        else:
            data, ext, _ = _encoded_copy(source, max_pixels)
            image = _decode(data)
        rgb = image if image.mode == "RGB" else image.convert("RGB")
        return cls(ext=ext, size=rgb.size, image=rgb, data=data)

    @property
    def stored_bytes(self) -> int:
        """The size of the two files `store` writes (the session's quota is sized from it)."""
        width, height = self.size
        pixels = width * height * 4
        if self.data is not None:
            return len(self.data) + pixels
        return _BMP_HEADER_BYTES + _bmp_row(width) * height + pixels

    def store(self, copy_path: str, pixel_path: str) -> None:
        """Write the encoded copy to `copy_path` and the RGBX pixels to `pixel_path`: the
        layout Pillow keeps RGB images in, which the code's process maps as they are."""
        width, height = self.size
        with open(copy_path, "wb") as f:
            if self.data is None:
                self.image.save(f, format="BMP")
            else:
                f.write(self.data)
        with open(pixel_path, "wb") as f:
            # Sized first: the session's tmpfs (huge=within_size) backs a file with huge pages
            # only where they fit within its size, which a file written piece by piece has not.
            f.truncate(width * height * 4)
            f.write(self.image.tobytes("raw", "RGBX"))


def _bmp_row(width: int) -> int:
    """Bytes per row of a 24-bit BMP: 3 per pixel, padded to a multiple of 4."""
    return (width * 3 + 3) // 4 * 4


def describe_input(source: ImageSource, max_pixels: int) -> InputHeader:
    """The header of an input, checked against the pixel limit, without encoding a PIL image
    (what a deferred session needs at once; `SessionInput.of` does the rest later)."""
    if isinstance(source, Image.Image):
        _check_pixels(source.size, max_pixels)
        return InputHeader(PIL_INPUT_EXT, source.size)
    _, ext, size = _encoded_copy(source, max_pixels)
    return InputHeader(ext, size)


def _encoded_copy(
    source: str | Path | bytes, max_pixels: int
) -> tuple[bytes, str, tuple[int, int]]:
    """Encoded bytes, file extension and size of an input path or bytes, checked for
    decompression bombs: copied as they are (only the header is read)."""
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
