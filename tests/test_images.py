"""Image loading errors are recorded reasons, and the store keeps each image once."""

import base64
import hashlib
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from beacon.images import ImageError, ImageStore, image_key, load_image


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
@pytest.mark.parametrize("size", [(0, 0), (0, 5), (1, 1), (7, 3), (300, 250)])
def test_keys_hash_mode_size_and_raw_bytes(mode: str, size: tuple[int, int]) -> None:
    """Keys stored by earlier runs stay valid: the hash is over `tobytes()`, in every mode."""
    rng = np.random.default_rng(size[0])
    rgb = Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
    image = rgb.convert(mode)
    digest = hashlib.sha256(f"{mode}:{size[0]}x{size[1]}:".encode() + image.tobytes())
    assert image_key(image) == digest.hexdigest()
