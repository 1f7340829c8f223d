"""`encode_png` writes standard PNGs that decode to the exact pixels, whichever writer it uses."""

from __future__ import annotations

import io
import zlib

import numpy as np
import pytest
from PIL import Image

from beacon.benchmarks import get_benchmark
from beacon.images import encode_png, load_image


def _decoded(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def _random(mode: str, size: tuple[int, int], seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    bands = {"L": 1, "RGB": 3, "RGBA": 4}[mode]
    shape = (size[1], size[0], bands) if bands > 1 else (size[1], size[0])
    return Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode)


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA"])
@pytest.mark.parametrize("size", [(1, 1), (1, 7), (7, 1), (2, 3), (448, 448), (1023, 5)])
def test_pixels_survive_exactly(mode: str, size: tuple[int, int]) -> None:
    image = _random(mode, size, seed=size[0] * 31 + size[1])
    decoded = _decoded(encode_png(image))
    assert decoded.format == "PNG" and decoded.mode == mode and decoded.size == size
    assert decoded.tobytes() == image.tobytes()


def test_sub_filter_wraps_around_at_256() -> None:
    """Bytes that go down then up (255 -> 0 -> 255) need the filter's modulo-256 arithmetic."""
    row = np.array([[[255, 0, 9], [0, 255, 10], [255, 1, 8], [3, 254, 255]]], dtype=np.uint8)
    image = Image.fromarray(np.repeat(row, 3, axis=0), "RGB")
    assert _decoded(encode_png(image)).tobytes() == image.tobytes()


@pytest.mark.parametrize("level", [0, 1, 9])
def test_every_compression_level_decodes(level: int) -> None:
    image = _random("RGB", (64, 40))
    assert _decoded(encode_png(image, compress_level=level)).tobytes() == image.tobytes()


def test_the_file_is_standard_png_whose_crcs_check() -> None:
    """Signature, IHDR / IDAT / IEND, each chunk's CRC: a strict reader (not only PIL's lenient
    one) accepts it. Walks the chunks by hand."""
    data = encode_png(_random("RGB", (20, 10)))
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    offset, kinds = 8, []
    while offset < len(data):
        length = int.from_bytes(data[offset : offset + 4], "big")
        kind = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        crc = int.from_bytes(data[offset + 8 + length : offset + 12 + length], "big")
        assert crc == zlib.crc32(body, zlib.crc32(kind)), kind
        kinds.append(kind)
        offset += 12 + length
    assert kinds == [b"IHDR", b"IDAT", b"IEND"]


def test_metadata_png_writes_is_kept() -> None:
    """An ICC profile or a transparency colour is part of what the PNG says: PIL writes those."""
    image = _random("RGB", (8, 8))
    image.info["icc_profile"] = b"not a real profile, but bytes"
    assert _decoded(encode_png(image)).info.get("icc_profile") == image.info["icc_profile"]
    grey = _random("L", (8, 8))
    grey.info["transparency"] = 7
    assert _decoded(encode_png(grey)).info.get("transparency") == 7


@pytest.mark.parametrize("mode", ["1", "P", "I;16", "LA"])
def test_other_modes_go_to_pil(mode: str) -> None:
    image = Image.new(mode, (9, 5))
    decoded = _decoded(encode_png(image))
    assert decoded.size == (9, 5)
    assert decoded.tobytes() == image.convert(decoded.mode).tobytes()


def test_about_pils_size_on_noise_photos_and_charts() -> None:
    """The point of the Sub filter: a file about PIL's size (PIL tries five filters per row);
    measured -50% to +2% on these, +10% on noise-free gradients (no such photo exists)."""
    rng = np.random.default_rng(1)
    smooth = np.asarray(
        Image.fromarray(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)).resize(
            (256, 192), Image.BICUBIC
        ),
        dtype=np.float64,
    )
    photo = Image.fromarray(np.clip(smooth + rng.normal(0, 6, smooth.shape), 0, 255).astype("u1"))
    chart = load_image(next(iter(get_benchmark("synth").load(limit=1))).images[0])
    for image in (_random("RGB", (128, 128)), photo, chart):
        pil = io.BytesIO()
        image.save(pil, format="PNG", compress_level=1)
        assert len(encode_png(image)) <= 1.05 * len(pil.getvalue())
