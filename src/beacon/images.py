"""Image loading and the run's content-addressed image store.

Trajectories refer to images by the SHA-256 of their pixels, so eight rollouts of one
prompt that return the same crop store it once, and a trajectory stays one small JSON line.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import threading
from pathlib import Path

from PIL import Image

from beacon.types import ImageSource

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
    if isinstance(source, bytes):
        return source
    text = str(source)
    if isinstance(source, str) and not os.path.exists(text) and len(text) > 256:
        try:
            return base64.b64decode(text, validate=True)
        except ValueError as exc:
            raise ImageError("string is neither an existing path nor valid base64") from exc
    try:
        return Path(text).read_bytes()
    except OSError as exc:
        raise ImageError(f"cannot read image file {text!r}: {exc.strerror}") from exc


def encode_png(image: Image.Image, compress_level: int = 1) -> bytes:
    """PNG bytes at a fast compression level (level 6 costs more than the image work itself)."""
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=compress_level)
    return buf.getvalue()


def image_key(image: Image.Image) -> str:
    """SHA-256 of an image's mode, size and raw pixels: equal images get equal keys."""
    digest = hashlib.sha256(f"{image.mode}:{image.width}x{image.height}:".encode())
    digest.update(image.tobytes())
    return digest.hexdigest()


class ImageStore:
    """Content-addressed PNG files under `root`: `put` returns a key, `get` loads it back.

    Safe for concurrent use from threads and processes: files are written to a temporary name
    and renamed into place, so a reader never sees half a file.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.png"

    def put(self, image: Image.Image) -> str:
        """Store `image` once; the key hashes its pixels, so the PNG is encoded only when new."""
        key = image_key(image)
        path = self.path(key)
        if path.exists():
            return key
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(encode_png(image))
        os.replace(tmp, path)
        return key

    def get(self, key: str) -> Image.Image:
        return load_image(self.path(key))
