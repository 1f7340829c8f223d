"""Input images as a session stores them: the encoded copy and the raw RGBX pixels it maps."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

import beacon.sandbox
from beacon.images import ImageError
from beacon.sandbox.inputs import PIL_INPUT_EXT, SessionInput

LIMIT = 10_000_000


def _image(mode: str, size: tuple[int, int]) -> Image.Image:
    rng = np.random.default_rng(sum(size))
    rgba = rng.integers(0, 256, size=(size[1], size[0], 4), dtype=np.uint8)
    return Image.fromarray(rgba, "RGBA").convert(mode)


def _store(item: SessionInput, folder: Path) -> tuple[bytes, bytes]:
    copy, pixels = folder / f"copy{item.ext}", folder / "pixels.rgbx"
    item.store(str(copy), str(pixels))
    return copy.read_bytes(), pixels.read_bytes()


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "P", "1"])
@pytest.mark.parametrize("size", [(1, 1), (5, 3), (7, 2), (64, 48)])
def test_a_pil_input_is_stored_as_bmp_and_rgbx_pixels(
    mode: str, size: tuple[int, int], tmp_path: Path
) -> None:
    source = _image(mode, size)
    item = SessionInput.of(source, LIMIT)
    copy, pixels = _store(item, tmp_path)
    rgb = source.convert("RGB")
    assert item.ext == PIL_INPUT_EXT and item.size == size
    assert pixels == rgb.tobytes("raw", "RGBX")  # Pillow's own memory layout, mappable
    pillows = io.BytesIO()
    rgb.save(pillows, format="BMP")
    assert copy == pillows.getvalue()  # byte for byte the BMP Pillow writes
    decoded = cv2.imdecode(np.frombuffer(copy, np.uint8), cv2.IMREAD_COLOR)  # code may use cv2
    assert decoded[..., ::-1].tobytes() == rgb.tobytes()
    assert item.stored_bytes == len(copy) + len(pixels)  # what sizes the session's quota


def test_wide_and_tall_images(tmp_path: Path) -> None:
    for size in ((30_000, 3), (3, 30_000), (1000, 97)):
        rgb = _image("RGB", size)
        copy, pixels = _store(SessionInput.of(rgb, 10**9), tmp_path)
        pillows = io.BytesIO()
        rgb.save(pillows, format="BMP")
        assert copy == pillows.getvalue() and pixels == rgb.tobytes("raw", "RGBX")


def test_storing_never_saves_the_callers_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The engine may encode the same image in another thread meanwhile; `save` sets attributes
    # on the image it saves (encoderinfo, encoderconfig), so two at once can mix them up.
    saved: list[Image.Image] = []
    save = Image.Image.save
    monkeypatch.setattr(
        Image.Image, "save", lambda im, *a, **k: saved.append(im) or save(im, *a, **k)
    )
    source = _image("RGB", (6, 4))
    before = (source.tobytes(), dict(source.__dict__))
    _store(SessionInput.of(source, LIMIT), tmp_path)
    assert saved and all(image is not source for image in saved)
    assert (source.tobytes(), dict(source.__dict__)) == before


def test_encoded_bytes_and_paths_are_copied_as_they_are(tmp_path: Path) -> None:
    source = _image("RGB", (9, 5))
    buf = io.BytesIO()
    source.save(buf, format="PNG")
    path = tmp_path / "input.png"
    path.write_bytes(buf.getvalue())
    for given in (buf.getvalue(), path, str(path)):
        item = SessionInput.of(given, LIMIT)
        folder = tmp_path / type(given).__name__
        folder.mkdir()
        copy, pixels = _store(item, folder)
        assert item.ext == ".png" and copy == buf.getvalue()
        assert pixels == source.tobytes("raw", "RGBX")
        assert item.stored_bytes == len(copy) + len(pixels)


def test_inputs_over_the_pixel_limit_are_refused_before_decoding(tmp_path: Path) -> None:
    big = _image("RGB", (50, 40))
    buf = io.BytesIO()
    big.save(buf, format="PNG")
    for given in (big, buf.getvalue()):
        with pytest.raises(ImageError, match="over the limit of 1999"):
            SessionInput.of(given, 1999)
    with pytest.raises(ImageError, match="cannot decode"):
        SessionInput.of(b"not an image", LIMIT)


MAP = """
import sys
sys.path.insert(0, sys.argv[1])
import child as episode
from PIL import Image
image = episode.map_pixels(sys.argv[2], [int(sys.argv[3]), int(sys.argv[4])])
episode._PILLOW_MAJOR = 12  # Pillow before 13 cannot export a mapped image: it converts
converted = episode.map_pixels(sys.argv[2], [int(sys.argv[3]), int(sys.argv[4])])
sys.stdout.buffer.write(image.mode.encode() + b" " + image.tobytes() + converted.tobytes())
"""


def test_the_code_sees_the_stored_pixels_as_an_rgb_image(tmp_path: Path) -> None:
    """What `episode.map_pixels` makes of a stored input, in a process of its own (the jail's
    copy of `episode` imports as top level): the input, pixel for pixel, mapped or converted."""
    source = _image("RGB", (7, 5))
    _, pixels = _store(SessionInput.of(source, LIMIT), tmp_path)
    (tmp_path / "pixels.rgbx").write_bytes(pixels)
    folder = os.path.dirname(beacon.sandbox.__file__)
    args = [folder, str(tmp_path / "pixels.rgbx"), "7", "5"]
    out = subprocess.run([sys.executable, "-c", MAP, *args], capture_output=True, check=True)
    assert out.stdout == b"RGB " + source.tobytes() * 2
