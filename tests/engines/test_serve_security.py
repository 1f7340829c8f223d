"""`beacon serve` trusts no client (issue 40), over real HTTP on the tiny model: host files,
weight pushes, the API key, resource caps, the event loop, and fair sharing of the engine.

Tests that need no setting run the server as `serve_in_thread(engine)` gives it, so the same
test fails by its assertion on a server without these defences.
"""

from __future__ import annotations

import base64
import os
import struct
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from PIL import ImageFile

from beacon.engines.hf import HFEngine
from beacon.engines.openai import OpenAIEngine, image_data_url
from beacon.engines.serve import serve_in_thread
from beacon.fakes.logits import NoEndOfSequence

from .helpers import make_image

OCTET = {"Content-Type": "application/octet-stream"}
KEY = "sesame-test-key"


@pytest.fixture(scope="module")
def engine(tiny_dir) -> Iterator[HFEngine]:
    """An engine of this module's own: tests push weights into it (and put them back)."""
    engine = HFEngine(tiny_dir("qwen2_vl"), batch_size=4)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def base(engine) -> Iterator[str]:
    """A server with the default settings."""
    handle = serve_in_thread(engine, model_name="tiny")
    yield handle.base_url
    handle.stop()


@pytest.fixture()
def serve(engine):
    """`serve(**settings)` starts a server with those settings, stopped after the test."""
    from beacon.engines.serve_guard import ServeSettings

    handles = []

    def start(**settings) -> str:
        handles.append(serve_in_thread(engine, "tiny", settings=ServeSettings(**settings)))
        return handles[-1].base_url

    yield start
    for handle in handles:
        handle.stop()


@pytest.fixture()
def pristine(engine) -> Iterator[dict[str, torch.Tensor]]:
    """The engine's weights before the test; put back after it."""
    before = {k: v.clone() for k, v in engine.model.state_dict().items()}
    yield before
    engine.load_weights(before)


def _chat(base_url: str, body: dict, headers: dict | None = None) -> httpx.Response:
    return httpx.post(f"{base_url}/chat/completions", json=body, headers=headers, timeout=120)


def _body(*parts: dict, **fields) -> dict:
    content = [*parts, {"type": "text", "text": "What is it?"}]
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 2, **fields}


def _image_part(shape: str, path: Path) -> dict:
    if shape == "file_url":
        return {"type": "image_url", "image_url": {"url": f"file://{path}"}}
    if shape == "bare_path":
        return {"type": "image_url", "image_url": {"url": str(path)}}
    return {"type": "image", "image": str(path)}


def _message(reply: httpx.Response) -> str:
    return reply.json()["error"]["message"]


def _unchanged(engine: HFEngine, before: dict[str, torch.Tensor]) -> bool:
    after = engine.model.state_dict()
    return all(torch.equal(after[k], v) for k, v in before.items())


# --- host files ------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["file_url", "bare_path", "image_part"])
def test_no_host_file_is_read_for_a_client_by_default(base, tmp_path, shape):
    real = tmp_path / "secret.png"
    make_image(32, 24, 1).save(real)
    replies = [_chat(base, _body(_image_part(shape, p))) for p in (real, tmp_path / "none.png")]
    assert [r.status_code for r in replies] == [400, 400]
    assert _message(replies[0]) == _message(replies[1])  # existence does not show


def test_allowed_local_media_path_reads_only_regular_files_below_it(serve, tmp_path):
    media, limit = tmp_path / "media", 100_000
    media.mkdir()
    picture = make_image(32, 24, 1)
    picture.save(media / "a.png")
    picture.save(tmp_path / "secret.png")
    (media / "link.png").symlink_to(tmp_path / "secret.png")
    (media / "zero").symlink_to("/dev/zero")
    os.mkfifo(media / "fifo")
    (media / "folder.png").mkdir()
    (media / "big.png").write_bytes(b"\0" * (limit + 1))
    base_url = serve(allowed_local_media_path=media, max_body_bytes=limit)

    sent = _chat(
        base_url,
        _body(
            {"type": "image_url", "image_url": {"url": image_data_url(picture)}},
            return_token_ids=True,
        ),
    )
    for shape in ("file_url", "bare_path", "image_part"):
        reply = _chat(base_url, _body(_image_part(shape, media / "a.png"), return_token_ids=True))
        assert reply.status_code == 200
        assert reply.json()["prompt_token_ids"] == sent.json()["prompt_token_ids"]

    refused = ["secret.png", "media/../secret.png", "media/link.png", "media/zero",
               "media/fifo", "media/folder.png", "media/big.png", "media/none.png"]  # fmt: skip
    replies = [_chat(base_url, _body(_image_part("file_url", tmp_path / p))) for p in refused]
    assert [r.status_code for r in replies] == [400] * len(refused)
    assert len({_message(r) for r in replies}) == 1  # one text, whatever the reason


# --- weight updates --------------------------------------------------------------------------


def _update(base_url: str, tensors: dict[str, torch.Tensor], headers=OCTET, **kw) -> httpx.Response:
    from safetensors.torch import save

    url = base_url.removesuffix("/v1") + "/beacon/update_weights"
    return httpx.post(url, content=save(tensors), headers=headers, timeout=60, **kw)


def _a_weight(engine: HFEngine) -> tuple[str, str]:
    """A matrix and the token embedding, by state-dict name."""
    names = engine.model.state_dict()
    embedding = next(n for n in names if n.endswith("embed_tokens.weight"))
    matrix = next(n for n in names if n.endswith("q_proj.weight"))
    return matrix, embedding


def test_weight_updates_are_refused_unless_allowed(base, engine, pristine):
    matrix, _ = _a_weight(engine)
    reply = _update(base, {matrix: torch.zeros_like(pristine[matrix])})
    assert reply.status_code == 403 and "--allow-weight-updates" in _message(reply)
    assert _unchanged(engine, pristine)


def test_a_weight_push_must_be_octet_stream(serve, engine, pristine):
    base_url = serve(allow_weight_updates=True)
    matrix, _ = _a_weight(engine)
    zeros = {matrix: torch.zeros_like(pristine[matrix])}
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": content_type} if content_type else {}
        assert _update(base_url, zeros, headers=headers).status_code == 415
    assert _unchanged(engine, pristine)


@pytest.mark.parametrize("problem", ["nan", "broadcast", "unknown", "dtype", "inf"])
def test_a_rejected_push_changes_no_weight(serve, engine, pristine, problem):
    """A good tensor beside one bad one: the whole push is refused, the good one too."""
    base_url = serve(allow_weight_updates=True)
    matrix, embedding = _a_weight(engine)
    push = {matrix: torch.zeros_like(pristine[matrix])}
    if problem == "nan":  # copy_ would have broadcast it over the whole embedding
        push[embedding] = torch.tensor([float("nan")])
    elif problem == "broadcast":
        push[embedding] = torch.tensor([0.5])
    elif problem == "unknown":
        push["model.not_a.weight"] = torch.zeros(2)
    elif problem == "dtype":
        push[embedding] = pristine[embedding].double()
    else:
        push[embedding] = pristine[embedding].clone()
        push[embedding][3, 1] = float("inf")
    reply = _update(base_url, push)
    assert reply.status_code == 400 and "no weight changed" in _message(reply)
    assert _unchanged(engine, pristine)
    assert _chat(base_url, _body()).status_code == 200  # and the server still generates


def test_a_good_push_is_applied_whole(serve, engine, pristine):
    base_url = serve(allow_weight_updates=True)
    matrix, embedding = _a_weight(engine)
    push = {matrix: torch.zeros_like(pristine[matrix]), embedding: pristine[embedding] * 2}
    reply = _update(base_url, push)
    assert reply.status_code == 200 and reply.json() == {"updated": 2}
    weights = engine.model.state_dict()
    assert torch.equal(weights[matrix], push[matrix])
    assert torch.equal(weights[embedding], push[embedding])


def test_a_push_larger_than_the_model_is_413(serve, engine, pristine):
    from beacon.engines.weights import push_size_limit

    base_url = serve(allow_weight_updates=True)
    url = base_url.removesuffix("/v1") + "/beacon/update_weights"
    body = b"\0" * (push_size_limit(engine.weight_specs()) + 1)
    assert httpx.post(url, content=body, headers=OCTET, timeout=60).status_code == 413
    assert _unchanged(engine, pristine)


# --- API key ---------------------------------------------------------------------------------


def test_every_route_but_health_needs_the_api_key(serve, engine, pristine):
    base_url = serve(api_key=KEY, allow_weight_updates=True)
    root = base_url.removesuffix("/v1")
    assert httpx.get(f"{root}/health").status_code == 200
    routes = [("GET", "/v1/models"), ("POST", "/v1/chat/completions"),
              ("POST", "/beacon/update_weights"), ("GET", "/beacon/weights"), ("GET", "/docs"),
              ("GET", "/openapi.json"),
              ("GET", "/no/such/route")]  # fmt: skip
    wrong = [{}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY},
             {"Authorization": f"Bearer {KEY}x"}, {"Authorization": f"Basic {KEY}"}]  # fmt: skip
    for method, path in routes:
        for headers in wrong:
            assert httpx.request(method, root + path, headers=headers).status_code == 401
    assert _unchanged(engine, pristine)
    good = {"Authorization": f"Bearer {KEY}"}
    assert httpx.get(f"{base_url}/models", headers=good).json()["data"][0]["id"] == "tiny"
    assert _chat(base_url, _body(), headers=good).status_code == 200


def test_the_openai_engine_and_the_critic_client_send_the_key(serve, images):
    import asyncio

    from beacon.engines.base import GenerationRequest, SamplingParams
    from beacon.train.opd.critic import CriticHTTPError, CriticRequest, HttpCritic

    base_url = serve(api_key=KEY)
    request = GenerationRequest(
        [{"role": "user", "content": "hi"}], SamplingParams(temperature=0.0, max_new_tokens=2)
    )
    [good] = OpenAIEngine(base_url, "tiny", api_key=KEY).generate([request])
    [bad] = OpenAIEngine(base_url, "tiny", max_retries=0).generate([request])
    assert good.error is None and len(good.token_ids) == 2
    assert "HTTP 401" in bad.error

    critic = CriticRequest("k", [{"role": "user", "content": "hi"}], frozenset(), [], max_tokens=2)
    assert isinstance(asyncio.run(HttpCritic(base_url, "tiny", api_key=KEY)(critic)), str)
    with pytest.raises(CriticHTTPError, match="401"):
        asyncio.run(HttpCritic(base_url, "tiny")(critic))


# --- resource limits and validation ----------------------------------------------------------


def test_a_body_over_the_cap_is_413(serve):
    base_url = serve(max_body_bytes=20_000)
    long_text = {"messages": [{"role": "user", "content": "word " * 5_000}], "max_tokens": 1}
    assert _chat(base_url, long_text).status_code == 413
    assert _chat(base_url, _body()).status_code == 200


def test_max_tokens_over_the_limit_is_400(base):
    reply = _chat(base, _body(max_tokens=10**6))
    assert reply.status_code == 400 and "--max-tokens-limit" in _message(reply)


def test_prompt_and_max_tokens_must_fit_the_context(base, serve):
    reply = _chat(base, _body(max_tokens=8192))  # the tiny model's context is 8192 tokens
    assert reply.status_code == 400 and "maximum context length is 8192" in _message(reply)
    small = serve(max_model_len=40)
    assert _chat(small, _body(max_tokens=2)).status_code == 200
    reply = _chat(small, _body(max_tokens=39))
    assert reply.status_code == 400 and "maximum context length is 40" in _message(reply)


def _blank_png(width: int, height: int) -> bytes:
    """A black grey-scale PNG, deflated row by row so it is never whole in memory."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    deflate, row = zlib.compressobj(9), b"\0" * (width + 1)
    data = b"".join(deflate.compress(row) for _ in range(height)) + deflate.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")
    )


def test_image_pixels_are_capped_from_the_header(base):
    png = _blank_png(13000, 13000)
    assert len(png) < 300_000  # the 160 KB PNG that decoded to 3 GB
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    reply = _chat(base, _body({"type": "image_url", "image_url": {"url": url}}))
    assert reply.status_code == 400
    assert "13000x13000" in _message(reply) and "--max-image-pixels" in _message(reply)


def test_the_pixel_cap_counts_every_image_of_a_request(serve):
    base_url = serve(max_image_pixels=2 * 32 * 24 - 1)
    part = {"type": "image_url", "image_url": {"url": image_data_url(make_image(32, 24, 1))}}
    assert _chat(base_url, _body(part)).status_code == 200
    reply = _chat(base_url, _body(part, part))
    assert reply.status_code == 400 and "--max-image-pixels" in _message(reply)


@pytest.mark.parametrize(
    "raw",
    [
        '{"messages": [{"role": "user", "content": "q"}], "max_tokens": Infinity}',
        '{"messages": [{"role": "user", "content": "q"}], "temperature": NaN}',
        '{"messages": [{"role": "user", "content": "q"}], "top_p": -Infinity}',
        '{"messages": [{"role": "user", "content": ["q"]}]}',
        '{"messages": [{"role": "user", "content": [7]}]}',
        '{"messages": [{"role": "user", "content": [{"type": "audio"}]}]}',
        '{"messages": ["q"]}',
        '{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": 5}]}]}',
        '{"messages": [{"role": "user", "content": "q"}], "seed": 1e400}',
        '{"messages": [{"role": "user", "content": "q"}], "seed": 123456789012345678901234}',
        '{"messages": [{"role": "user", "content": "q"}], "stop": [""]}',
        '{"messages": [{"role": "user", "content": "q"}], "temperature": 1e-300}',
        "[" * 100_000,
    ],
)
def test_malformed_requests_are_400_not_500(base, raw):
    headers = {"Content-Type": "application/json"}
    reply = httpx.post(f"{base}/chat/completions", content=raw, headers=headers, timeout=60)
    if "1e-300" in raw:  # under vLLM's epsilon: greedy, not a NaN softmax
        assert reply.status_code == 200
        return
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["type"] == "BadRequestError"


def test_chat_takes_json_only(base):
    """A cross-site form or `text/plain` POST cannot start work."""
    raw = '{"messages": [{"role": "user", "content": "q"}], "max_tokens": 1}'
    for content_type in ("text/plain", "application/x-www-form-urlencoded"):
        headers = {"Content-Type": content_type}
        reply = httpx.post(f"{base}/chat/completions", content=raw, headers=headers, timeout=60)
        assert reply.status_code == 415


def test_image_decoding_does_not_hold_the_event_loop(base, monkeypatch):
    """While one request's image decodes, the server answers others (the decode is held here
    until the server has answered /health; on the event loop, /health would never come)."""
    entered, release = threading.Event(), threading.Event()
    load = ImageFile.ImageFile.load

    def held(image):
        if image.size == (77, 33):
            entered.set()
            release.wait(120)
        return load(image)

    monkeypatch.setattr(ImageFile.ImageFile, "load", held)
    part = {"type": "image_url", "image_url": {"url": image_data_url(make_image(77, 33, 2))}}
    replies: list[httpx.Response] = []
    sender = threading.Thread(target=lambda: replies.append(_chat(base, _body(part))))
    sender.start()
    try:
        assert entered.wait(120)
        assert httpx.get(base.removesuffix("/v1") + "/health", timeout=30).status_code == 200
    finally:
        release.set()
        sender.join()
    assert replies[0].status_code == 200


# --- sharing the engine ----------------------------------------------------------------------


def test_a_short_request_is_not_held_for_a_long_ones_length(tiny_dir):
    """The short request arrives while the long one runs; it must be answered long before the
    long one's last token (counted in decode steps, not seconds)."""
    from beacon.engines.serve_guard import ServeSettings

    long_tokens = 400
    engine = HFEngine(tiny_dir("qwen2_vl"), batch_size=4)
    counter = NoEndOfSequence(engine.tokenizer.eos_token_ids)
    engine.logits_processors = [counter]
    handle = serve_in_thread(engine, "tiny", settings=ServeSettings(chunk_tokens=16))
    replies: list[httpx.Response] = []
    try:
        body = {"messages": [{"role": "user", "content": "long"}], "max_tokens": long_tokens}
        runner = threading.Thread(target=lambda: replies.append(_chat(handle.base_url, body)))
        runner.start()
        while counter.steps == 0 and runner.is_alive():
            threading.Event().wait(0.01)
        short = _chat(handle.base_url, _body())
        steps_when_short_done = counter.steps
        runner.join()
    finally:
        handle.stop()
        engine.close()
    assert short.status_code == 200 and short.json()["usage"]["completion_tokens"] == 2
    assert replies[0].json()["usage"]["completion_tokens"] == long_tokens
    assert steps_when_short_done < long_tokens // 2
