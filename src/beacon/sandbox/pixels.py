"""A Pillow image's pixels as they lie in its memory: no packing, no copy. Runs in the jail.

Pillow keeps an RGB image at 4 bytes per pixel (RGBX); `Image.tobytes()` packs it to 3 bytes
one pixel at a time, and the trusted side unpacked them again (together ~0.25 ms of a call
returning a 600x450 image). Pillow 11.2+ exports an image's memory through the Arrow C data
interface (`__arrow_c_array__`); where it does and the rows lie in one piece, `raw_pixels` is
a view of that memory, which `episode` writes to the returned image's file as it is (the
trusted side wraps it without a copy, `results`; the wire calls RGB in this layout "RGBX") and
pickles as it is for the next call (`reduce_image`). Elsewhere (older Pillow, an image over
Pillow's 16 MB block size) `tobytes()` packs as before.
"""

from __future__ import annotations

import ctypes
import pickle
from typing import Any

from PIL import Image

LAYOUTS = {"L": ("L", 1), "RGB": ("RGBX", 4), "RGBA": ("RGBA", 4)}
"""Pillow mode: (its memory layout as a mode on the wire, bytes per pixel)."""


class _ArrowSchema(ctypes.Structure):
    pass


_ArrowSchema._fields_ = (
    ("format", ctypes.c_char_p),
    ("name", ctypes.c_char_p),
    ("metadata", ctypes.c_void_p),
    ("flags", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("children", ctypes.POINTER(ctypes.POINTER(_ArrowSchema))),
    ("dictionary", ctypes.c_void_p),
    ("release", ctypes.c_void_p),
    ("private_data", ctypes.c_void_p),
)


class _ArrowArray(ctypes.Structure):
    pass


_ArrowArray._fields_ = (
    ("length", ctypes.c_int64),
    ("null_count", ctypes.c_int64),
    ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("buffers", ctypes.POINTER(ctypes.c_void_p)),
    ("children", ctypes.POINTER(ctypes.POINTER(_ArrowArray))),
    ("dictionary", ctypes.c_void_p),
    ("release", ctypes.c_void_p),
    ("private_data", ctypes.c_void_p),
)
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = (ctypes.py_object, ctypes.c_char_p)


def raw_pixels(img: Image.Image) -> memoryview | None:
    """`img`'s pixel memory (layout `LAYOUTS[img.mode]`), or None where it cannot be had.

    The view keeps Pillow's export alive, and the export keeps the memory alive: the view stays
    valid after `img` is gone. Writing to it changes the image.
    """
    if img.mode not in LAYOUTS or not hasattr(img, "__arrow_c_array__"):
        return None
    try:
        schema_capsule, array_capsule = img.__arrow_c_array__()
    except ValueError:  # rows in more than one block (an image over Pillow's 16 MB block size)
        return None
    schema = _ArrowSchema.from_address(_capsule_pointer(schema_capsule, b"arrow_schema"))
    array = _ArrowArray.from_address(_capsule_pointer(array_capsule, b"arrow_array"))
    if schema.n_children:  # 4 bytes per pixel: a fixed-size list of 4 uint8 per pixel
        array = array.children[0].contents
    size = img.width * img.height * LAYOUTS[img.mode][1]
    if array.offset or array.length != size or array.n_buffers < 2 or not array.buffers[1]:
        return None
    memory = (ctypes.c_char * size).from_address(array.buffers[1])
    memory.export = array_capsule  # released (and the memory with it) when the view goes
    return memoryview(memory).cast("B")


def reduce_image(img: Image.Image) -> Any:
    """A pickle reduction (protocol 5) of a plain `Image.Image` by its raw memory, for
    `pickle.Pickler.reducer_override`; `NotImplemented` (Pillow's own pickling) otherwise.

    Pillow pickles through `tobytes()`. This pickles the memory in place (the pickler writes a
    large buffer straight to its file), and the unpickled image is made over the pickle's own
    copy of the bytes (`_unpickle`): loading the benchmark's 1200x900 crop took 0.3 ms
    instead of 0.8. Subclasses (an opened PNG file) keep Pillow's way, which keeps their class.
    """
    if type(img) is not Image.Image:
        return NotImplemented
    raw = raw_pixels(img)
    if raw is None:
        return NotImplemented
    return _unpickle, (img.mode, img.size, img.info, pickle.PickleBuffer(raw))


def from_raw(mode: str, size: tuple[int, int], data: Any) -> Image.Image:
    """An image of `mode` made over `data` in that mode's memory layout (`LAYOUTS`), not of a
    copy: read-only where `data` is (Pillow then copies on the first write).

    Pillow's own `frombuffer` would make an RGBX image of RGBX bytes; this maps them as RGB, as
    Pillow keeps it. The child maps its inputs so, and the trusted side its returned images.
    """
    depth = LAYOUTS[mode][1]
    core = Image.core.map_buffer(data, size, "raw", 0, (mode, size[0] * depth, 1))
    img = Image.new(mode, (0, 0))._new(core)
    img.readonly = int(memoryview(data).readonly)
    return img


def _unpickle(mode: str, size: tuple[int, int], info: dict, data: bytes) -> Image.Image:
    """The image of `reduce_image`, over `data`, the unpickler's copy of the pixels (bytes
    where the image was read-only)."""
    img = from_raw(mode, size, data)
    img.info = info
    return img
