"""PNG encoding: `beacon.images.encode_png` (Sub filter + ISA-L deflate) against the libraries'.

Every episode's images are PNG-encoded once: for the image store and for the data URL of an
openai-engine request (`beacon.images.png_bytes` shares one encoding). Compares time and size
at compression level 1 against Pillow's writer (all five filters tried on every row) and
OpenCV's (libpng told to use the same Sub filter, with zlib's RLE strategy, the fastest of its
settings here), on three kinds of image: a `synth_demo` item (448x448, noisy background), a
`synth` chart (1024x768, flat colours) and a photo-like image (1024x768, smooth colour field
plus sensor-like noise, JPEG round trip). A benchmark, not a test.

    python benchmarks/png_encode.py --repeats 20
"""

from __future__ import annotations

import argparse
import io
import platform
import time
from collections.abc import Callable

import cv2
import numpy as np
from PIL import Image

from beacon.benchmarks import get_benchmark
from beacon.images import encode_png, load_image


def pil_png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def opencv_png(image: Image.Image) -> bytes:
    bgr = cv2.cvtColor(np.asarray(image), cv2.COLOR_RGB2BGR)
    params = [cv2.IMWRITE_PNG_COMPRESSION, 1, cv2.IMWRITE_PNG_FILTER, cv2.IMWRITE_PNG_FILTER_SUB]
    params += [cv2.IMWRITE_PNG_STRATEGY, cv2.IMWRITE_PNG_STRATEGY_RLE]
    return cv2.imencode(".png", bgr, params)[1].tobytes()


def photo_like(seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    field = Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8))
    pixels = np.asarray(field.resize((1024, 768), Image.BICUBIC), dtype=np.float64)
    noisy = np.clip(pixels + rng.normal(0, 6, pixels.shape), 0, 255).astype(np.uint8)
    jpeg = io.BytesIO()
    Image.fromarray(noisy).save(jpeg, format="JPEG", quality=85)
    return load_image(jpeg.getvalue())


def timed(encode: Callable[[Image.Image], bytes], image: Image.Image, repeats: int) -> float:
    encode(image)
    start = time.perf_counter()
    for _ in range(repeats):
        encode(image)
    return (time.perf_counter() - start) / repeats * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    images = {
        "synth_demo 448x448": next(iter(get_benchmark("synth_demo").load(limit=1))).images[0],
        "synth chart 1024x768": next(iter(get_benchmark("synth").load(limit=1))).images[0],
        "photo-like 1024x768": photo_like(),
    }
    print(f"machine: {platform.machine()}, Python {platform.python_version()}, level 1\n")
    writers = {"Pillow": pil_png, "OpenCV": opencv_png, "encode_png": encode_png}
    print("| image | " + " | ".join(f"{name} ms | KB" for name in writers) + " |")
    print("|---|" + "---|---|" * len(writers))
    for name, source in images.items():
        image = load_image(source)
        cells = []
        for encode in writers.values():
            assert load_image(encode(image)).tobytes() == image.tobytes()
            cells.append(f"{timed(encode, image, args.repeats):.1f} | {len(encode(image)) >> 10}")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
