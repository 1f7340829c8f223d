"""`PerImage` memos live as long as their image; the store and the openai engine share one PNG."""

from __future__ import annotations

import gc
from pathlib import Path

from PIL import Image

from beacon.engines.openai import OpenAIEngine, image_data_url
from beacon.images import ImageStore, PerImage, encode_png, png_bytes


def test_per_image_computes_once_and_forgets_with_the_image() -> None:
    calls: list[int] = []
    memo = PerImage(lambda im: calls.append(1) or im.size)
    image = Image.new("RGB", (4, 3))
    assert memo(image) == memo(image) == (4, 3) and len(calls) == 1
    assert memo(Image.new("RGB", (4, 3))) == (4, 3) and len(calls) == 2  # equal, not the same
    del image
    gc.collect()
    assert memo._values == {}


def test_store_and_request_share_one_encoding(tmp_path: Path, monkeypatch) -> None:
    image = Image.new("RGB", (64, 48), "teal")
    expected_url = image_data_url(image)  # what a request sent before the memo: a fresh encode
    store = ImageStore(tmp_path)
    key = store.put(image)
    assert store.path(key).read_bytes() == png_bytes(image) == encode_png(image)
    monkeypatch.setattr(png_bytes, "_compute", lambda image: 1 / 0)  # nothing encodes again
    assert store.put(image) == key
    assert OpenAIEngine("http://127.0.0.1:9", "m")._data_url(image) == expected_url


def test_equal_copies_share_a_recent_png(monkeypatch) -> None:
    image = Image.new("RGB", (40, 30), "orange")
    first = png_bytes(image)
    calls: list[int] = []
    monkeypatch.setattr("beacon.images.encode_png", lambda im: calls.append(1) or b"fresh")
    assert png_bytes(image.copy()) == first and calls == []  # a rollout's own copy: no encode
    tagged = image.copy()
    tagged.info["icc_profile"] = b"profile"  # written into the PNG: not the same bytes
    assert png_bytes(tagged) == b"fresh" and calls == [1]
