"""`pixels.raw_pixels` (the jail's view of an image's memory) and the trusted side's RGBX images."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
from PIL import Image

from beacon.sandbox import pixels, wire
from beacon.sandbox.results import _image

needs_arrow = pytest.mark.skipif(
    not hasattr(Image.Image, "__arrow_c_array__"), reason="Pillow < 11.2 exports no memory"
)


def photo(mode: str, width: int = 61, height: int = 37) -> Image.Image:
    rng = np.random.default_rng(width * height)
    rgba = rng.integers(0, 256, size=(height, width, 4), dtype=np.uint8)
    return Image.fromarray(rgba, "RGBA").convert(mode)


@needs_arrow
@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA"])
def test_raw_pixels_are_the_images_memory_in_its_layout(mode: str) -> None:
    img = photo(mode)
    layout, depth = pixels.LAYOUTS[mode]
    view = pixels.raw_pixels(img)
    assert view is not None and view.nbytes == img.width * img.height * depth
    assert bytes(view) == img.tobytes("raw", layout)
    view[0] = 7  # the image's own memory, not a copy
    assert img.getpixel((0, 0)) == 7 or img.getpixel((0, 0))[0] == 7


@needs_arrow
def test_the_view_outlives_the_image() -> None:
    img = photo("RGB")
    expected = img.tobytes("raw", "RGBX")
    view = pixels.raw_pixels(img)
    del img
    Image.new("RGB", (61, 37), (255, 0, 0)).load()  # reuse freed memory, if it were freed
    assert bytes(view) == expected


def test_no_view_where_the_rows_are_split_or_the_mode_has_no_layout() -> None:
    big = Image.new("RGB", (3000, 2000))  # 24 MB: over Pillow's 16 MB block size
    assert pixels.raw_pixels(big) is None
    for mode in ("P", "I;16", "F", "1", "LA"):
        assert pixels.raw_pixels(photo(mode)) is None


def test_no_view_without_pillows_arrow_export(monkeypatch: pytest.MonkeyPatch) -> None:
    img = photo("RGB")
    monkeypatch.delattr(Image.Image, "__arrow_c_array__", raising=False)  # Pillow before 11.2
    assert pixels.raw_pixels(img) is None


@pytest.mark.parametrize("buffer", [bytes, bytearray])
def test_the_trusted_side_wraps_rgbx_as_rgb_without_a_copy(buffer: type) -> None:
    img = photo("RGB")
    raw = buffer(img.tobytes("raw", "RGBX"))
    assert wire.check_image_meta(wire.image_meta("RGBX", 61, 37), len(raw), 61 * 37) == (
        "RGBX", 61, 37,
    )  # fmt: skip
    got = _image("RGBX", (61, 37), raw)
    assert got.mode == "RGB" and got.size == (61, 37)
    assert np.array_equal(np.asarray(got), np.asarray(img))
    got.putpixel((0, 0), (1, 2, 3))  # read-only bytes are copied first; a bytearray is its own
    assert got.getpixel((0, 0)) == (1, 2, 3)
    assert (raw[:3] == b"\x01\x02\x03") == (buffer is bytearray)


def test_rgbx_needs_four_bytes_a_pixel() -> None:
    with pytest.raises(wire.WireError, match="needs 16 bytes"):
        wire.check_image_meta(wire.image_meta("RGBX", 2, 2), 12, 64)


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: object) -> object:
        return pixels.reduce_image(obj) if isinstance(obj, Image.Image) else NotImplemented


def raw_pickle(value: object) -> bytes:
    out = io.BytesIO()
    _Pickler(out, protocol=5).dump(value)
    return out.getvalue()


@needs_arrow
@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA"])
def test_images_pickle_by_their_memory_and_come_back_whole(mode: str) -> None:
    img = photo(mode)
    img.info["dpi"] = (72, 72)
    data = raw_pickle({"img": img, "n": 3})
    assert len(data) > img.width * img.height * pixels.LAYOUTS[mode][1]  # unpacked
    back = pickle.loads(data)
    assert back["n"] == 3 and type(back["img"]) is Image.Image
    assert back["img"].mode == mode and back["img"].info == {"dpi": (72, 72)}
    assert back["img"].tobytes() == img.tobytes()
    back["img"].putpixel((0, 0), 0 if mode == "L" else (0,) * len(mode))  # its own memory
    assert pickle.loads(raw_pickle(back["img"])).tobytes() == back["img"].tobytes()


def test_what_has_no_raw_view_pickles_as_pillow_does() -> None:
    for img in (photo("P"), Image.new("RGB", (3000, 2000), (1, 2, 3))):
        assert pixels.reduce_image(img) is NotImplemented
        assert pickle.loads(raw_pickle(img)).tobytes() == img.tobytes()


def test_a_read_only_image_comes_back_copy_on_write() -> None:
    img = photo("RGB")
    raw = img.tobytes("raw", "RGBX")
    back = pixels._unpickle("RGB", img.size, {}, raw)
    assert back.readonly and back.tobytes() == img.tobytes()
    back.putpixel((0, 0), (9, 9, 9))
    assert back.getpixel((0, 0)) == (9, 9, 9) and raw == img.tobytes("raw", "RGBX")
