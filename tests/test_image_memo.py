"""`PerImage` memos live as long as their image; the store and the openai engine share one PNG."""

from __future__ import annotations

import gc
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from PIL import Image

from beacon import images
from beacon.engines.openai import OpenAIEngine, image_data_url
from beacon.images import ImageStore, PerImage, Recent, encode_png, png_bytes


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
    monkeypatch.setattr(images, "encode_png", lambda im, **kw: calls.append(1) or b"fresh")
    assert png_bytes(image.copy()) == first and calls == []  # a rollout's own copy: no encode
    tagged = image.copy()
    tagged.info["icc_profile"] = b"profile"  # written into the PNG: not the same bytes
    assert png_bytes(tagged) == b"fresh" and calls == [1]


def test_a_new_image_is_packed_once_for_its_key_and_png(monkeypatch) -> None:
    """`png_bytes` of an image not keyed yet hashes the pixels it encodes (one `np.asarray`),
    with the same key and bytes as computing each on its own."""
    image = Image.new("RGB", (50, 20), "navy")
    image.putpixel((3, 4), (1, 2, 3))
    expected_key, expected_png = images.image_key(image), encode_png(image)
    packs: list[int] = []
    tobytes = Image.Image.tobytes  # what `np.asarray` of an image runs
    monkeypatch.setattr(Image.Image, "tobytes", lambda *a, **k: packs.append(1) or tobytes(*a, **k))
    fresh = image.copy()
    assert png_bytes(fresh) == expected_png and packs == [1]
    assert images.pixel_key(fresh) == expected_key


def _by_size(compute) -> Recent[Image.Image, bytes]:
    return Recent(compute, key=lambda image: image.size, size=len, budget=10)


def _callers_of_a_held_computation(make_memo, outcome, sources: list) -> tuple:
    """`memo(source)` for each source from its own thread, the first call's computation held
    until the others have reached it; its result is `outcome(number of computations)`.
    Returns the memo, the calls' futures (all done) and the computations counted."""
    calls: list[int] = []
    started, release = threading.Event(), threading.Event()

    def slow(image: Image.Image) -> object:
        calls.append(1)
        started.set()
        release.wait(10)
        return outcome(len(calls))

    memo = make_memo(slow)
    with ThreadPoolExecutor(len(sources)) as pool:
        first = pool.submit(memo, sources[0])
        assert started.wait(10)
        rest = [pool.submit(memo, source) for source in sources[1:]]
        time.sleep(0.1)  # let them reach the running computation (a G-rollout group's copies)
        release.set()
    return memo, [first, *rest], calls


def test_callers_of_a_key_being_computed_wait_for_that_computation() -> None:
    copies = [Image.new("RGB", (5, 5)) for _ in range(8)]
    _, futures, calls = _callers_of_a_held_computation(_by_size, lambda n: b"png", copies)
    assert [f.result() for f in futures] == [b"png"] * 8
    assert calls == [1]


def test_per_image_callers_of_an_image_being_computed_wait_for_it() -> None:
    """An episode's request and its trajectory's record ask for one image's key at once: it
    is hashed once. A failure reaches every waiter and is not kept."""

    def outcome(n: int) -> int:
        if n == 1:
            raise ValueError("first try fails")
        return n

    image = Image.new("RGB", (3, 3))
    memo, futures, calls = _callers_of_a_held_computation(PerImage, outcome, [image] * 4)
    for future in futures:
        with pytest.raises(ValueError, match="first try"):
            future.result()
    assert calls == [1] and memo(image) == 2 and memo(image) == 2 and calls == [1, 1]


def test_a_failed_computation_fails_its_waiters_and_is_not_kept() -> None:
    outcomes = iter([ValueError("corrupt"), b"png"])

    def compute(image: Image.Image) -> bytes:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    recent = _by_size(compute)
    with pytest.raises(ValueError, match="corrupt"):
        recent(Image.new("RGB", (2, 2)))
    assert recent(Image.new("RGB", (2, 2))) == b"png"  # computed again, not a cached failure


def test_recent_values_stay_within_the_budget() -> None:
    calls: list[tuple[int, int]] = []
    recent = _by_size(lambda image: calls.append(image.size) or b"123456")  # 6 of 10 bytes
    recent(Image.new("RGB", (1, 1)))
    recent(Image.new("RGB", (2, 2)))  # 12 bytes: the oldest goes
    recent(Image.new("RGB", (2, 2)))
    recent(Image.new("RGB", (1, 1)))
    assert calls == [(1, 1), (2, 2), (1, 1)]
    recent.clear()
    recent(Image.new("RGB", (1, 1)))
    assert calls == [(1, 1), (2, 2), (1, 1), (1, 1)]
