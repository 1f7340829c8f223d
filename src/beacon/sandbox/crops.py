"""Crop boxes clamped into the image at run time (Thyme's crop repair, without code analysis).

Models write crop boxes that are unordered, fall outside the image or are a pixel wide. The
sandbox patches `Image.Image.crop` in the child (as it patches `show()`) so that every crop,
whatever expression computed its box, gets `clamp_box(box, image.size)`; the call's `notes` say
which boxes changed. A valid box is passed on unchanged, so PIL's own crops of valid boxes
(`ImageOps.fit`, ...) are unaffected.

Standard library only: this file is copied into the jail next to `child.py`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any


def clamp_box(box: Any, size: Any, min_size: int = 4) -> Any:
    """A crop box (x0, y0, x1, y1) ordered, clamped into an image of `size` (w, h), and at least
    `min_size` pixels per side (or the whole side when the image is smaller).

    A valid box is returned as given (the same object, floats kept); a repaired one as a tuple
    of ints, its edges rounded outwards. A box lying outside the image becomes the `min_size`
    strip at the nearest edge. Anything but four finite numbers and a positive (w, h) pair comes
    back unchanged, so that PIL reports its own error.
    """
    if not (_finite_numbers(box, 4) and _finite_numbers(size, 2)) or min(size) < 1:
        return box
    if box_is_valid(box, size, min_size):
        return box
    x0, x1 = _clamp_span(box[0], box[2], int(size[0]), min_size)
    y0, y1 = _clamp_span(box[1], box[3], int(size[1]), min_size)
    return (x0, y0, x1, y1)


def box_is_valid(box: Any, size: Any, min_size: int) -> bool:
    """Ordered, inside the image, and at least `min_size` (or the whole side) per side."""
    x0, y0, x1, y1 = box
    width, height = size
    fits_x = x0 >= 0 and x0 + min(min_size, width) <= x1 <= width
    return fits_x and y0 >= 0 and y0 + min(min_size, height) <= y1 <= height


def _clamp_span(a: float, b: float, limit: int, min_size: int) -> tuple[int, int]:
    """One side of a box: ordered, inside [0, limit], grown around its centre to min_size."""
    lo = min(max(math.floor(min(a, b)), 0), limit)
    hi = min(max(math.ceil(max(a, b)), 0), limit)
    need = min(min_size, limit)
    if hi - lo < need:
        lo = min(max((lo + hi - need) // 2, 0), limit - need)
        hi = lo + need
    return lo, hi


def _finite_numbers(values: Any, count: int) -> bool:
    try:
        return len(values) == count and all(
            isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
            for v in values
        )
    except TypeError:
        return False
