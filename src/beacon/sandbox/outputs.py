"""What a call returns besides its text: shown and saved images, and clamped crop boxes.

Runs in the child next to `child.py` (copied into the jail). `Image.show()` and `plt.show()`
are patched to collect images instead of opening a viewer, `Image.crop` to clamp its box
(`crops.clamp_box`); image paths printed to stdout or set as `processed_path` are read back.

Where a returned image came from (`track_crops`): the input images carry their frame in
`info[ORIGIN]` (also when the code opens `image_path` itself); `crop` and `resize(box=...)`
compose their box with their source's, the PIL operations that copy `info` (resize, convert,
copy, ...) keep it, and `save` remembers it for the file it writes. What is not covered: images
made through numpy or OpenCV, drawn on a new canvas, or carried over from an earlier call have
no origin; rotations and transforms keep their source's box.
"""

from __future__ import annotations

import os
import re
from typing import Any

import crops
import matplotlib.pyplot as plt
import numpy as np
import wire
from PIL import Image

THYME_OUTPUT_DIR = "/mnt/data/temp_processed_images/"
_IMAGE_PATH = re.compile(r"[^\s'\"<>(),\[\]]+\.(?:png|jpe?g|bmp|gif|webp|tiff?)\b", re.IGNORECASE)
_MAX_CROP_NOTES = 3
"""Clamped crops noted one by one; further ones are counted in the last note."""
_PRISTINE = (Image.Image.show, plt.show, Image.Image.crop)
"""What `capture_shows` and `clamp_crops` replace, for `restore` (and wrapped by the latter)."""
_PRISTINE_TRACKED = (Image.Image.resize, Image.Image.save, Image.open)
"""What `track_crops` replaces besides `crop`, for `restore`."""
ORIGIN = "beacon_origin"
"""`info` key of an image's origin: (input image index, (x0, y0, x1, y1) in its pixels)."""
_saved: dict[str, tuple] = {}
"""Origins of the files this call saved, by real path (the child runs one call)."""


def crop_notes(clamped: list[str]) -> list[str]:
    """The notes for the crop boxes clamped in a call: a few, the last counting the rest."""
    notes = clamped[:_MAX_CROP_NOTES]
    if len(clamped) > _MAX_CROP_NOTES:
        notes[-1] += f" ({len(clamped) - _MAX_CROP_NOTES} more crop boxes were clamped too)"
    return notes


def capture_shows(shown: list, max_pixels: int, refused: list[str]) -> None:
    """Make `Image.show()` and `plt.show()` return their images instead of opening a viewer."""

    def show_image(img: Image.Image, *args: Any, **kwargs: Any) -> None:
        if _fits(img.width, img.height, max_pixels, refused):
            shown.append(img.copy())

    def show_figures(*args: Any, **kwargs: Any) -> None:
        for number in plt.get_fignums():
            fig = plt.figure(number)
            fig.canvas.draw()
            rgba = np.asarray(fig.canvas.buffer_rgba())
            if _fits(rgba.shape[1], rgba.shape[0], max_pixels, refused):
                shown.append(Image.fromarray(rgba[..., :3].copy()))
        plt.close("all")

    Image.Image.show = show_image
    plt.show = show_figures


def clamp_crops(min_size: int, clamped: list[str]) -> None:
    """Make `Image.crop` clamp its box into the image, noting each box it changes."""
    original = _PRISTINE[2]

    def crop(img: Image.Image, box: Any = None) -> Image.Image:
        if box is not None:
            fixed = crops.clamp_box(box, img.size, min_size)
            if fixed is not box:
                clamped.append(
                    f"crop box {_short(repr(tuple(box) if isinstance(box, list) else box))} "
                    f"was outside the {img.width}x{img.height} image "
                    f"or too small; it was clamped to {fixed}"
                )
                box = fixed
        return original(img, box)

    Image.Image.crop = crop


def track_crops(frames: list[Image.Image], paths: list[str], min_size: int | None) -> None:
    """Record in `info[ORIGIN]` where each image lies in an input image (module docstring);
    `min_size` is the clamp's (None: crops are not clamped). Call after `clamp_crops`."""
    for index, frame in enumerate(frames):
        frame.info[ORIGIN] = (index, (0, 0, frame.width, frame.height))
    frame_of = {os.path.realpath(p): i for i, p in enumerate(paths)}
    inner_crop = Image.Image.crop
    resize, save, open_image = _PRISTINE_TRACKED

    def crop(img: Image.Image, box: Any = None) -> Image.Image:
        out = inner_crop(img, box)
        used = crops.clamp_box(box, img.size, min_size) if min_size and box is not None else box
        return _with_origin(out, img, used)

    def resize_box(img: Image.Image, size: Any, *args: Any, **kwargs: Any) -> Image.Image:
        box = kwargs.get("box", args[1] if len(args) > 1 else None)
        return _with_origin(resize(img, size, *args, **kwargs), img, box)

    def save_origin(img: Image.Image, fp: Any, *args: Any, **kwargs: Any) -> None:
        save(img, fp, *args, **kwargs)
        if ORIGIN in img.info and isinstance(fp, str | os.PathLike):
            _saved[os.path.realpath(fp)] = img.info[ORIGIN]

    def open_frame(fp: Any, *args: Any, **kwargs: Any) -> Image.Image:
        img = open_image(fp, *args, **kwargs)
        real = os.path.realpath(fp) if isinstance(fp, str | os.PathLike) else None
        origin = (frame_of[real], (0, 0, *img.size)) if real in frame_of else _saved.get(real)
        if origin is not None:
            img.info[ORIGIN] = origin
        return img

    _saved.clear()
    Image.Image.crop, Image.Image.resize, Image.Image.save = crop, resize_box, save_origin
    Image.open = open_frame


def _with_origin(out: Image.Image, source: Image.Image, box: Any) -> Image.Image:
    """`out`, cut by `box` (None: all of it) from `source`, with its origin in `source`'s frame
    (none where `source` has none or the box is not four numbers)."""
    origin = source.info.get(ORIGIN)
    out.info.pop(ORIGIN, None)  # PIL copied the source's info, which is not where `out` lies
    if origin is None:
        return out
    frame, (x0, y0, x1, y1) = origin
    box = (0, 0, *source.size) if box is None else box
    try:
        sx, sy = (x1 - x0) / source.width, (y1 - y0) / source.height
        bx0, by0, bx1, by1 = (float(v) for v in box)
    except (TypeError, ValueError, ZeroDivisionError):
        return out
    out.info[ORIGIN] = (frame, (x0 + bx0 * sx, y0 + by0 * sy, x0 + bx1 * sx, y0 + by1 * sy))
    return out


def origin_meta(img: Image.Image) -> list[int] | None:
    """[frame, x0, y0, x1, y1] of an image's origin, rounded to pixels, for the result header."""
    origin = img.info.get(ORIGIN)
    if origin is None:
        return None
    frame, box = origin
    return [int(frame), *(round(v) for v in box)]


def restore() -> None:
    """Undo `capture_shows`, `clamp_crops` and `track_crops` (after a rehearsal: the real call
    may not clamp)."""
    Image.Image.show, plt.show, Image.Image.crop = _PRISTINE
    Image.Image.resize, Image.Image.save, Image.open = _PRISTINE_TRACKED


def _short(text: str) -> str:
    return text if len(text) <= 80 else "..." + text[-77:]  # a path's end names the file


def _fits(width: int, height: int, max_pixels: int, refused: list[str]) -> bool:
    if width * height <= max_pixels:
        return True
    refused.append(
        f"image of {width}x{height} pixels refused: over the limit of {max_pixels} pixels; "
        "resize or crop it before returning it"
    )
    return False


def file_images(
    stdout: str,
    ns: dict,
    before: dict,
    start: float,
    request: wire.RunRequest,
    refused: list[str],
    notes: list[str],
) -> list[Image.Image]:
    """Images named by printed paths or by a new/updated `processed_path` variable.

    The input images themselves are never returned this way (printing `image_path` is common).
    A path that cannot be read as an image is skipped with a note; the others still come back.
    """
    candidates = _IMAGE_PATH.findall(stdout)
    value = ns.get("processed_path")
    if isinstance(value, str | list | tuple):
        values = [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)]
        for path in values:
            if value != before.get("processed_path") or _modified_since(path, start):
                candidates.append(path)
    if not candidates:
        return []
    images, seen = [], {os.path.realpath(p) for p in request.image_paths}
    for path in candidates:
        if path.startswith(THYME_OUTPUT_DIR) and not os.path.exists(path):
            path = os.path.join(request.out_dir, path[len(THYME_OUTPUT_DIR) :])
        real = os.path.realpath(path)
        if real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        try:
            image = _read_image(real, request.max_image_pixels, refused)
        except Image.DecompressionBombError as exc:
            refused.append(f"image {path} refused: {exc}")
            continue
        except Exception as exc:  # unreadable, not an image, truncated: PIL raises many types
            notes.append(f"{_short(path)} could not be read as an image ({type(exc).__name__}); "
                         "it was skipped")  # fmt: skip
            continue
        if image is not None:
            if real in _saved:
                image.info[ORIGIN] = _saved[real]
            images.append(image)
    return images


def _read_image(path: str, max_pixels: int, refused: list[str]) -> Image.Image | None:
    with Image.open(path) as img:
        if not _fits(img.width, img.height, max_pixels, refused):
            return None
        img.load()
        return img.copy()


def _modified_since(path: str, start: float) -> bool:
    try:
        return os.stat(path).st_mtime >= start - 1.0
    except OSError:
        return False
