"""GRPO with rollouts on two `beacon serve` processes: requests spread over both, new weights
pushed to both after every step, and afterwards both generate exactly what the trained
checkpoint generates (and not what the initial weights do)."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest
import torch

from beacon.engines.base import GenerationRequest, SamplingParams
from beacon.engines.hf import HFEngine
from beacon.engines.openai import OpenAIEngine
from beacon.engines.weights import WeightSpec
from beacon.train.core.checkpoint import latest_checkpoint
from beacon.train.core.metrics import read_metrics
from beacon.train.grpo import run_grpo
from beacon.train.grpo.config import GRPOConfig

from .grpo_helpers import choice_processor, grpo_settings
from .servers import API_KEY, beacon_servers

SERVE_WORKER = Path(__file__).with_name("serve_worker.py")


@pytest.mark.slow
def test_grpo_on_two_servers_pushes_the_new_weights(
    tiny_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The servers run as they should beyond one machine: with an API key (from
    BEACON_API_KEY) and weight updates on; the trainer sends the key it reads from
    rollout.server_api_key_env with every request and push."""
    monkeypatch.setenv("ROLLOUT_KEY", API_KEY)
    with beacon_servers(tiny_model_path, 2, [sys.executable, str(SERVE_WORKER)]) as servers:
        urls = [server.url for server in servers]
        for url in urls:  # the key is required: nothing is answered without it
            assert httpx.get(f"{url}/models", timeout=10).status_code == 401
        settings = grpo_settings(tmp_path / "run", max_steps=1)
        settings["rollout"]["servers"] = urls
        settings["rollout"]["server_api_key_env"] = "ROLLOUT_KEY"
        run_grpo(GRPOConfig.model_validate(settings))
        rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
        assert any(m["sequences"] > 0 and m["grad_norm"] > 0 for m in rows)

        request = GenerationRequest(
            messages=[{"role": "user", "content": "What is in the box?"}],
            sampling=SamplingParams(temperature=0.0, max_new_tokens=12, logprobs=True),
        )
        trained = HFEngine(latest_checkpoint(tmp_path / "run"), batch_size=1)
        initial = HFEngine(tiny_model_path, batch_size=1)
        for engine in (trained, initial):
            engine.logits_processors = [choice_processor(engine.tokenizer)]
        expected = trained.generate([request])[0]
        before = initial.generate([request])[0]
        assert not torch.allclose(
            torch.tensor(expected.logprobs), torch.tensor(before.logprobs), atol=1e-3
        )
        for url in urls:
            client = OpenAIEngine(
                base_url=url, model="beacon", api_key=API_KEY, tokenizer=trained.tokenizer
            )
            got = client.generate([request])[0]
            client.close()
            assert got.token_ids == expected.token_ids
            assert torch.allclose(
                torch.tensor(got.logprobs), torch.tensor(expected.logprobs), atol=1e-4
            )


class _Engine:
    """A stand-in engine: generation is never called; `load_weights` records what came."""

    name = "fake"
    tokenizer = None
    batch_size = 1

    def __init__(self, accepts: bool) -> None:
        self.received: dict[str, torch.Tensor] = {}
        if accepts:
            self.load_weights = self._load

    def weight_specs(self) -> dict[str, WeightSpec]:
        return {name: WeightSpec((2, 3), torch.float32) for name in ("a.weight", "tied.weight")}

    def _load(self, tensors: dict[str, torch.Tensor], exact_dtype: bool) -> int:
        self.received = dict(tensors)
        return len(tensors)

    def generate(self, requests):  # pragma: no cover - not called
        raise NotImplementedError


def test_update_weights_endpoint_takes_safetensors_and_refuses_the_rest() -> None:
    from fastapi.testclient import TestClient

    from beacon.engines.serve import create_app
    from beacon.engines.serve_guard import ServeSettings
    from beacon.engines.weights import weights_payload

    weight = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    state = {"a.weight": weight, "tied.weight": weight}  # shared storage travels as two entries
    engine = _Engine(accepts=True)
    allowed = ServeSettings(allow_weight_updates=True)
    binary = {"Content-Type": "application/octet-stream"}
    with TestClient(create_app(engine, settings=allowed)) as client:
        reply = client.post(
            "/beacon/update_weights", content=weights_payload(state), headers=binary
        )
        assert reply.status_code == 200 and reply.json() == {"updated": 2}
        assert torch.equal(engine.received["tied.weight"], weight)
        reply = client.post("/beacon/update_weights", content=b"not tensors", headers=binary)
        assert reply.status_code == 400
    with TestClient(create_app(_Engine(accepts=False), settings=allowed)) as client:
        assert client.post("/beacon/update_weights", content=b"", headers=binary).status_code == 501


def test_logits_processors_are_refused_with_servers() -> None:
    """Served rollouts sample on the servers' engines: a processor factory given to the run
    would do nothing there, so it is refused, naming rollout.servers."""
    from beacon.train.core.config import ServedRolloutConfig
    from beacon.train.core.setup import rollout_engine

    rollout = ServedRolloutConfig(servers=["http://127.0.0.1:9/v1"])
    with pytest.raises(ValueError, match=r"rollout\.servers"):
        rollout_engine("unused", rollout, "cpu", 1, object(), logits_processors=lambda tok: [])
