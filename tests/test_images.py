"""Image loading errors are recorded reasons, and the store keeps each image once."""

import base64
import hashlib
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from beacon.images import ImageError, ImageStore, image_key, load_image, raw_chunks, write_raw


def png_bytes(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def test_loads_every_source_kind(tmp_path: Path) -> None:
    image = Image.new("L", (30, 20), 128)
    path = tmp_path / "a.png"
    image.save(path)
    data = png_bytes(image)
    long_b64 = base64.b64encode(png_bytes(Image.new("RGB", (300, 300), "red"))).decode()
    for source in (image, path, str(path), data):
        loaded = load_image(source)
        assert loaded.mode == "RGB" and loaded.size == (30, 20)
    assert load_image(long_b64).size == (300, 300)


def test_errors_say_why(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="cannot read image file"):
        load_image(tmp_path / "missing.png")
    with pytest.raises(ImageError, match="cannot decode"):
        load_image(b"not an image")
    with pytest.raises(ImageError, match="decompression bomb"):
        load_image(png_bytes(Image.new("1", (2000, 2000))), max_pixels=1000)


def test_store_keeps_equal_images_once(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "images")
    a = Image.new("RGB", (10, 10), "blue")
    key = store.put(a)
    assert store.put(a.copy()) == key == image_key(a)
    assert store.put(Image.new("RGB", (10, 10), "green")) != key
    assert len(list((tmp_path / "images").rglob("*.png"))) == 2
    assert store.get(key).tobytes() == a.tobytes()


RAW_MODES = ["1", "L", "P", "LA", "RGB", "RGBA", "CMYK", "YCbCr", "I", "I;16", "F"]


@pytest.mark.parametrize("mode", RAW_MODES)
@pytest.mark.parametrize("size", [(1, 1), (7, 3), (17_000, 2), (300, 250)])
def test_raw_chunks_and_write_raw_give_tobytes(
    mode: str, size: tuple[int, int], tmp_path: Path
) -> None:
    rng = np.random.default_rng(size[0])
    rgb = Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
    image = rgb.convert(mode)
    chunks = list(raw_chunks(image))
    assert b"".join(chunks) == image.tobytes()
    assert all(len(c) <= max(64 << 10, size[0] * 4) for c in chunks)  # never one big buffer
    path = tmp_path / "raw"
    with path.open("wb") as f:
        f.write(b"head")  # buffered bytes before the encoder writes to the descriptor
        write_raw(image, f)
    assert path.read_bytes() == b"head" + image.tobytes()
    digest = hashlib.sha256(f"{mode}:{size[0]}x{size[1]}:".encode() + image.tobytes())
    assert image_key(image) == digest.hexdigest()  # keys stored by earlier runs stay valid


def test_raw_chunks_take_pillows_raw_arguments(tmp_path: Path) -> None:
    image = Image.fromarray(np.arange(5 * 3 * 3, dtype=np.uint8).reshape(3, 5, 3))
    bottom_up = image.tobytes("raw", "BGR", 16, -1)
    assert b"".join(raw_chunks(image, "BGR", 16, -1)) == bottom_up
    assert b"".join(raw_chunks(image, "RGBX")) == image.tobytes("raw", "RGBX")
    path = tmp_path / "raw"
    with path.open("wb") as f:
        write_raw(image, f, "BGR", 16, -1)
    assert path.read_bytes() == bottom_up


def test_empty_images_have_no_raw_bytes(tmp_path: Path) -> None:
    for size in ((0, 0), (0, 5), (5, 0)):
        image = Image.new("RGB", size)
        assert list(raw_chunks(image)) == [] and image.tobytes() == b""
        assert image_key(image) == hashlib.sha256(f"RGB:{size[0]}x{size[1]}:".encode()).hexdigest()
