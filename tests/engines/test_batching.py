"""Episodes each carry their own seed; that must not break the engine's batches into ones."""

from __future__ import annotations

from pathlib import Path

from beacon.engines.base import GenerationRequest, SamplingParams
from beacon.engines.hf import HFEngine


def test_requests_with_different_seeds_share_one_batch(tiny_model_path: Path) -> None:
    engine = HFEngine(tiny_model_path, batch_size=8)
    calls = []
    generate = engine.model.generate

    def counting_generate(**kwargs):
        calls.append(kwargs["input_ids"].shape[0])
        return generate(**kwargs)

    engine.model.generate = counting_generate
    requests = [
        GenerationRequest(
            messages=[{"role": "user", "content": f"question {i}"}],
            sampling=SamplingParams(temperature=1.0, max_new_tokens=4, seed=1000 + i),
        )
        for i in range(5)
    ]
    first = engine.generate(requests)
    assert calls == [5]
    again = engine.generate(requests)
    assert [r.token_ids for r in again] == [r.token_ids for r in first]
