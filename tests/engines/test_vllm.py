"""The vllm engine against the hf engine on the tiny model; needs vLLM and a CUDA GPU."""

from __future__ import annotations

import math

import pytest

from beacon.engines.base import GenerationRequest, SamplingParams

from .helpers import thyme_observation_chat, user_turn

vllm = pytest.importorskip("vllm")
torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="the vllm engine needs a CUDA GPU"),
]


@pytest.fixture(scope="module")
def engines(tiny_dir):
    from beacon.engines.hf import HFEngine
    from beacon.engines.vllm import VLLMEngine

    path = tiny_dir("qwen2_vl")
    vllm_engine = VLLMEngine(path, dtype="float32", enforce_eager=True, max_model_len=2048)
    yield HFEngine(path, device="cuda", dtype="float32"), vllm_engine
    vllm_engine.close()


def _requests(images):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=16, stop=["</answer>"])
    chat = thyme_observation_chat(images[0], images[1])
    return [
        GenerationRequest([user_turn("What digit?", images[0])], greedy),
        GenerationRequest([{"role": "user", "content": "text only"}], greedy),
        GenerationRequest(chat, greedy, continue_final_message=True),
    ]


def test_vllm_matches_hf_at_temperature_0(engines, images):
    hf, vl = engines
    for a, b in zip(hf.generate(_requests(images)), vl.generate(_requests(images)), strict=True):
        assert b.error is None
        assert b.prompt_ids == a.prompt_ids
        assert b.token_ids == a.token_ids
        assert b.text == vl.tokenizer.decode(b.token_ids)
        # float32 on different kernels; hf cuda vs cpu differ by up to 4.5e-3 on this model
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-2)


def test_token_in_with_images(engines, images):
    _, vl = engines
    chat = thyme_observation_chat(images[0], images[1])
    text = vl.tokenizer.render_chat(chat, continue_final_message=True)
    ids = vl.tokenizer.encode(text, images[:2])
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    by_ids = GenerationRequest([], greedy, prompt_ids=ids, images=images[:2])
    by_chat = GenerationRequest(chat, greedy, continue_final_message=True)
    a, b = vl.generate([by_ids, by_chat])
    assert a.prompt_ids == ids and a.token_ids == b.token_ids


def test_update_weights_zero_gives_uniform_logprobs(engines, images):
    hf, vl = engines
    zeros = [(k, torch.zeros_like(v)) for k, v in hf.model.state_dict().items()]
    vl.update_weights(zeros)
    assert vl.llm.collective_rpc("beacon_weight_abs_sum") == [0.0]
    params = SamplingParams(temperature=1.0, max_new_tokens=4, seed=0)
    [result] = vl.generate([GenerationRequest([user_turn("q", images[0])], params)])
    vocab = hf.model.get_output_embeddings().weight.shape[0]
    assert result.logprobs == pytest.approx([-math.log(vocab)] * len(result.logprobs), abs=1e-4)
