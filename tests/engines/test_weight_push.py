"""Weight pushes at real size over real HTTP (issue 49): an fp32 trainer pushes into a bf16
`beacon serve` (cast on the trainer's side), in several bodies, applied whole or not at all."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import torch
from safetensors.torch import save
from typer.testing import CliRunner

from beacon.engines.hf import HFEngine
from beacon.engines.serve import serve_in_thread
from beacon.engines.serve_guard import ServeSettings
from beacon.engines.weights import cast_for, chunk_names, push_weights, specs_from_json

KEY = "push-test-key"


@pytest.fixture(scope="module")
def bf16_server(tiny_dir) -> Iterator[tuple[HFEngine, str]]:
    """The tiny model served in bfloat16, as `beacon serve --dtype bfloat16` serves it."""
    engine = HFEngine(tiny_dir("qwen2_vl"), batch_size=1, dtype="bfloat16")
    settings = ServeSettings(api_key=KEY, allow_weight_updates=True)
    handle = serve_in_thread(engine, "tiny", settings=settings)
    yield engine, handle.base_url
    handle.stop()
    engine.close()


@pytest.fixture()
def trainer(bf16_server) -> dict[str, torch.Tensor]:
    """A float32 trainer's state dict that differs from the served weights in every float, by
    a function of the value, so tied weights (two names, one storage) stay equal."""
    engine, _ = bf16_server
    before = {k: v.clone() for k, v in engine.model.state_dict().items()}
    yield {k: v.float() * 1.01 + 1e-3 if v.is_floating_point() else v for k, v in before.items()}
    engine.load_weights(before)


def _served(engine: HFEngine) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in engine.model.state_dict().items()}


def test_an_fp32_trainer_pushes_into_a_bf16_server_in_chunks(bf16_server, trainer):
    engine, base_url = bf16_server
    cast = cast_for(trainer, engine.weight_specs())
    assert len(chunk_names(cast, 64 << 10)) > 3  # the push below takes several bodies
    push_weights([base_url], trainer, timeout_s=60, api_key=KEY, chunk_bytes=64 << 10)
    served = engine.model.state_dict()
    assert all(served[k].dtype == torch.bfloat16 for k in trainer if trainer[k].is_floating_point())
    assert all(torch.equal(served[k], v.to(served[k].dtype)) for k, v in trainer.items())


def test_an_uncast_fp32_body_is_refused_by_a_bf16_server(bf16_server, trainer):
    engine, base_url = bf16_server
    before = _served(engine)
    url = base_url.removesuffix("/v1") + "/beacon/update_weights"
    body = save({k: v.contiguous() for k, v in list(trainer.items())[:2]})
    headers = {"Content-Type": "application/octet-stream", "Authorization": f"Bearer {KEY}"}
    reply = httpx.post(url, content=body, headers=headers, timeout=60)
    assert reply.status_code == 400 and "expected torch.bfloat16" in reply.text
    assert all(torch.equal(engine.model.state_dict()[k], v) for k, v in before.items())


def _post_chunks(base_url: str, chunks: list[dict[str, torch.Tensor]], push: str, total: int):
    url = base_url.removesuffix("/v1") + "/beacon/update_weights"
    headers = {"Content-Type": "application/octet-stream", "Authorization": f"Bearer {KEY}"}
    return [
        httpx.post(
            f"{url}?push={push}&chunk={i}&chunks={total}",
            content=save({k: v.contiguous() for k, v in chunk.items()}),
            headers=headers,
            timeout=60,
        )
        for i, chunk in enumerate(chunks)
    ]


def _bf16_chunks(trainer: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    cast = {k: v.bfloat16() if v.is_floating_point() else v for k, v in trainer.items()}
    return [{n: cast[n] for n in run} for run in chunk_names(cast, 64 << 10)]


def test_a_push_without_its_last_chunk_changes_nothing(bf16_server, trainer):
    """A trainer that dies before its last body: the served model is the old one, and the
    next push (from chunk 0) is applied whole."""
    engine, base_url = bf16_server
    before, chunks = _served(engine), _bf16_chunks(trainer)
    replies = _post_chunks(base_url, chunks[:-1], "crashed", len(chunks))
    assert [r.status_code for r in replies] == [200] * (len(chunks) - 1)
    assert all(torch.equal(engine.model.state_dict()[k], v) for k, v in before.items())
    replies = _post_chunks(base_url, chunks, "again", len(chunks))
    assert replies[-1].json() == {"updated": len(trainer)}
    served = engine.model.state_dict()
    assert all(torch.equal(served[k], v.to(served[k].dtype)) for k, v in trainer.items())


def test_a_bad_chunk_refuses_the_whole_push(bf16_server, trainer):
    engine, base_url = bf16_server
    before, chunks = _served(engine), _bf16_chunks(trainer)
    name = next(iter(chunks[1]))
    chunks[1][name] = torch.full_like(chunks[1][name], float("nan"))
    replies = _post_chunks(base_url, chunks, "bad", len(chunks))
    assert replies[0].status_code == 200
    assert replies[1].status_code == 400 and "NaN" in replies[1].text
    assert all(r.status_code == 400 and "from chunk 0" in r.text for r in replies[2:])
    assert all(torch.equal(engine.model.state_dict()[k], v) for k, v in before.items())


def test_the_weight_list_needs_the_key_and_weight_updates(bf16_server):
    engine, base_url = bf16_server
    url = base_url.removesuffix("/v1") + "/beacon/weights"
    assert httpx.get(url, timeout=30).status_code == 401
    listed = httpx.get(url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30).json()
    assert specs_from_json(listed) == engine.weight_specs()
    assert {entry["dtype"] for entry in listed["weights"].values()} == {"bfloat16"}
    handle = serve_in_thread(engine, "tiny")  # weight updates off
    try:
        closed = handle.base_url.removesuffix("/v1") + "/beacon/weights"
        assert httpx.get(closed, timeout=30).status_code == 403
    finally:
        handle.stop()


def test_serve_refuses_an_unknown_dtype(tmp_path):
    from beacon.cli import app

    result = CliRunner().invoke(app, ["serve", "--model", str(tmp_path), "--dtype", "int8"])
    assert result.exit_code == 2 and "--dtype" in result.output
