"""Per-request sampling in the hf engine: own seeds and settings per row, batches unbroken."""

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


def test_a_seeded_request_samples_the_same_tokens_in_any_batch(tiny_model_path: Path) -> None:
    """Per-request seeding: a row's draws come from its own generator, so what else shares
    its batch (and in what order) does not change its tokens (issue 7 §3)."""
    engine = HFEngine(tiny_model_path, batch_size=8)

    def request(i: int, temperature: float = 1.0) -> GenerationRequest:
        return GenerationRequest(
            messages=[{"role": "user", "content": f"question {i}"}],
            sampling=SamplingParams(temperature=temperature, max_new_tokens=12, seed=7 + i),
        )

    alone = [engine.generate([request(i)])[0].token_ids for i in range(3)]
    mixed = engine.generate([request(9, 0.0), request(2), request(8, 0.7), request(0), request(1)])
    assert [mixed[3].token_ids, mixed[4].token_ids, mixed[1].token_ids] == alone
    assert len({tuple(t) for t in alone}) == 3  # different seeds, different samples


def test_sampling_settings_do_not_split_batches(tiny_model_path: Path) -> None:
    engine = HFEngine(tiny_model_path, batch_size=8)
    sizes = []
    generate = engine.model.generate
    engine.model.generate = lambda **kw: sizes.append(kw["input_ids"].shape[0]) or generate(**kw)
    settings = [(0.0, 1.0, 0), (1.0, 0.9, 0), (0.7, 1.0, 5), (1.0, 1.0, 0)]
    requests = [
        GenerationRequest(
            [{"role": "user", "content": "q"}],
            SamplingParams(temperature=t, top_p=p, top_k=k, max_new_tokens=3, seed=1),
        )
        for t, p, k in settings
    ]
    results = engine.generate(requests)
    assert sizes == [4] and all(r.error is None for r in results)


def test_sampling_probs_follow_temperature_top_k_and_top_p() -> None:
    """_sampling_probs against the warpers' definitions, computed by hand."""
    import torch

    from beacon.engines.hf import _sampling_probs

    logits = torch.tensor([2.0, 1.0, 0.0, -1.0], dtype=torch.float64)
    plain = _sampling_probs(logits, SamplingParams(temperature=0.5))
    assert torch.allclose(plain, torch.softmax(logits / 0.5, -1))
    top2 = _sampling_probs(logits, SamplingParams(temperature=1.0, top_k=2))
    assert torch.allclose(top2, torch.tensor([1, 1 / torch.e, 0, 0]).double() / (1 + 1 / torch.e))
    # softmax = [.644, .237, .087, .032]: the smallest set with mass >= 0.85 is {0, 1}
    nucleus = _sampling_probs(logits, SamplingParams(temperature=1.0, top_p=0.85))
    assert (nucleus[2:] == 0).all() and torch.isclose(nucleus.sum(), torch.tensor(1.0).double())
    assert (_sampling_probs(logits, SamplingParams(temperature=1.0, top_p=0.5)) > 0).sum() == 1


def test_batching_queue_runs_whatever_is_pending_as_one_batch() -> None:
    import asyncio
    import threading

    from beacon.engines.base import GenerationResult
    from beacon.engines.batching import BatchingQueue

    release, sizes = threading.Event(), []

    def generate(requests):
        sizes.append(len(requests))
        release.wait(timeout=30)
        return [GenerationResult(text=r.messages[0]["content"]) for r in requests]

    queue = BatchingQueue(generate, max_batch=4)

    async def main() -> list[str]:
        def ask(i: int):
            return queue.submit(GenerationRequest([{"role": "user", "content": str(i)}]))

        first = asyncio.ensure_future(ask(0))
        while not sizes:  # the first request is running alone; six more arrive meanwhile
            await asyncio.sleep(0.001)
        rest = [asyncio.ensure_future(ask(i)) for i in range(1, 7)]
        await asyncio.sleep(0.05)
        release.set()
        return [r.text for r in await asyncio.gather(first, *rest)]

    try:
        assert asyncio.run(main()) == [str(i) for i in range(7)]
    finally:
        queue.close()
    assert sizes == [1, 4, 2]
