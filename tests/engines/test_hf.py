"""The hf engine: batching, stop strings, forced tokens, log-probs, token-in, errors, weights."""

from __future__ import annotations

import math

import pytest
import torch

from beacon.engines.base import GenerationRequest, SamplingParams
from beacon.engines.hf import HFEngine, _Prepared
from beacon.fakes.logits import ScriptedTokens

from .helpers import thyme_observation_chat, user_turn

CODE = "<code>\n```python\nprint(image.size)\n```\n</code>"


def greedy(n: int = 12, **kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_new_tokens=n, **kw)


@pytest.fixture()
def forced_engine(tiny_dir):
    """A fresh engine whose logits processors each test may set."""
    return HFEngine(tiny_dir("qwen2_vl"), batch_size=4)


def _chats(images):
    return [
        [user_turn("What digit is in the box?", images[0])],
        [{"role": "user", "content": "No image here, a longer question than the others."}],
        [user_turn("Compare these two.", images[1], images[2])],
        thyme_observation_chat(images[0], images[2]),
    ]


def test_batched_equals_one_by_one(hf_engine, images):
    chats = _chats(images)
    requests = [
        GenerationRequest(c, greedy(), continue_final_message=(i == 3)) for i, c in enumerate(chats)
    ]
    batched = hf_engine.generate(requests)
    for request, result in zip(requests, batched, strict=True):
        [alone] = hf_engine.generate([request])
        assert result.token_ids == alone.token_ids
        # float32 with different padding: equal up to accumulation-order error
        assert result.logprobs == pytest.approx(alone.logprobs, abs=1e-4)


def test_result_fields_agree(hf_engine, images):
    for result in hf_engine.generate([GenerationRequest(c, greedy()) for c in _chats(images)]):
        assert result.finish_reason == "length" and result.error is None
        assert len(result.token_ids) == len(result.logprobs) == 12
        assert result.text == hf_engine.tokenizer.decode(result.token_ids)
        assert all(lp <= 0 for lp in result.logprobs)


def test_logprobs_are_raw_model_log_softmax(hf_engine, images):
    request = GenerationRequest([user_turn("Describe.", images[0])], greedy(6))
    [result] = hf_engine.generate([request])
    inputs = hf_engine._model_inputs([hf_engine._prepare(0, request)])
    full = torch.cat([inputs["input_ids"], torch.tensor([result.token_ids])], dim=1)
    n = len(result.token_ids)
    with torch.no_grad():
        logits = hf_engine.model(
            input_ids=full,
            attention_mask=torch.ones_like(full),
            pixel_values=inputs["pixel_values"],
            image_grid_thw=inputs["image_grid_thw"],
            mm_token_type_ids=(full == hf_engine.tokenizer.image_token_id).int(),
        ).logits[0, -n - 1 : -1]
    expected = torch.log_softmax(logits.double(), -1)[range(n), result.token_ids]
    # a single full forward vs cached step-by-step decoding in float32
    assert result.logprobs == pytest.approx(expected.tolist(), abs=1e-4)


def test_forced_code_block_stops_at_the_stop_string(forced_engine, images):
    script = forced_engine.tokenizer.encode(CODE + " trailing text")
    forced_engine.logits_processors = [ScriptedTokens(script)]
    chat = [user_turn("What digit?", images[0])]
    [result] = forced_engine.generate([GenerationRequest(chat, greedy(60, stop=["</code>"]))])
    assert result.finish_reason == "stop" and result.stop_reason == "</code>"
    assert result.text == CODE
    assert result.token_ids == forced_engine.tokenizer.encode(CODE)
    assert len(result.logprobs) == len(result.token_ids)
    assert all(lp < 0 for lp in result.logprobs)  # the model's own (low) odds of forced tokens


def test_stop_string_inside_a_token_keeps_the_whole_token(forced_engine):
    script = forced_engine.tokenizer.encode("print(image.size)")
    forced_engine.logits_processors = [ScriptedTokens(script)]
    chat = [{"role": "user", "content": "go"}]
    [result] = forced_engine.generate([GenerationRequest(chat, greedy(30, stop=["ima"]))])
    assert result.stop_reason == "ima"
    assert "ima" in result.text
    assert result.text == forced_engine.tokenizer.decode(result.token_ids)
    assert result.token_ids == script[: len(result.token_ids)]
    assert "ima" not in forced_engine.tokenizer.decode(result.token_ids[:-1])


def test_end_of_sequence_is_kept_and_ends_the_row(forced_engine):
    script = forced_engine.tokenizer.encode("<answer>7</answer><|im_end|>")
    forced_engine.logits_processors = [ScriptedTokens(script)]
    [result] = forced_engine.generate([GenerationRequest([user_turn("q")], greedy(30))])
    assert result.finish_reason == "stop" and result.stop_reason is None
    assert result.text == "<answer>7</answer><|im_end|>"
    assert result.token_ids[-1] in forced_engine.tokenizer.eos_token_ids


def test_rows_of_one_batch_stop_on_their_own_strings(forced_engine):
    script = forced_engine.tokenizer.encode(CODE)
    forced_engine.logits_processors = [ScriptedTokens(script)]
    requests = [
        GenerationRequest([user_turn("a")], greedy(40, stop=["python"])),
        GenerationRequest([user_turn("bb")], greedy(40, stop=["</code>"])),
        GenerationRequest([user_turn("ccc")], greedy(5)),
    ]
    first, second, third = forced_engine.generate(requests)
    assert first.text.endswith("python") and first.stop_reason == "python"
    assert second.text == CODE
    assert third.finish_reason == "length" and len(third.token_ids) == 5


def test_rows_of_one_batch_keep_their_own_token_limits(hf_engine, images):
    requests = [GenerationRequest([user_turn(f"q{n}", images[0])], greedy(n)) for n in (2, 9, 5)]
    batched = hf_engine.generate(requests)
    assert [len(r.token_ids) for r in batched] == [2, 9, 5]
    assert all(r.finish_reason == "length" for r in batched)
    assert [r.token_ids for r in batched] == [
        hf_engine.generate([q])[0].token_ids for q in requests
    ]


def test_prompt_ids_and_images_are_used_as_given(hf_engine, images):
    chat = thyme_observation_chat(images[0], images[1])
    text = hf_engine.tokenizer.render_chat(chat, continue_final_message=True)
    ids = hf_engine.tokenizer.encode(text, images[:2])
    by_messages = GenerationRequest(chat, greedy(), continue_final_message=True)
    by_ids = GenerationRequest([], greedy(), prompt_ids=ids, images=images[:2])
    swapped = GenerationRequest([], greedy(), prompt_ids=ids, images=[images[1], images[0]])
    a, b, c = hf_engine.generate([by_messages, by_ids, swapped])
    assert b.prompt_ids == ids and a.prompt_ids == ids
    assert a.token_ids == b.token_ids
    assert c.error is not None and "image token runs" in c.error  # sizes no longer fit


def test_images_are_processed_once_and_batch_like_the_processor(tiny_dir, images, monkeypatch):
    engine = HFEngine(tiny_dir("qwen2_vl"), batch_size=4)
    expected = engine.tokenizer.processor.image_processor(images=images, return_tensors="pt")
    calls: list[tuple[int, int]] = []
    recent, process = engine._pixels._compute, engine._process_image
    monkeypatch.setattr(recent, "_compute", lambda im: calls.append(im.size) or process(im))
    rows = [list(images), [image.copy() for image in images]]  # a group's rollouts: own copies
    ids = engine.tokenizer.encode(
        engine.tokenizer.render_chat([user_turn("Which one?", *images)]), images
    )
    inputs = engine._model_inputs([_Prepared(i, ids, row, greedy()) for i, row in enumerate(rows)])
    assert calls == [image.size for image in images]  # the copies: no processing again
    n = len(expected["pixel_values"])
    assert torch.equal(inputs["pixel_values"][:n], expected["pixel_values"])
    assert torch.equal(inputs["pixel_values"][n:], expected["pixel_values"])
    assert torch.equal(inputs["image_grid_thw"], torch.cat([expected["image_grid_thw"]] * 2))
    engine.close()
    assert recent._size == 0 and not recent._values  # close frees the kept tensors


def test_bad_requests_give_error_results_not_exceptions(hf_engine, images):
    requests = [
        GenerationRequest([user_turn("fine")], greedy(3)),
        GenerationRequest([user_turn("bad")], SamplingParams(temperature=-1)),
        GenerationRequest([], greedy(3), prompt_ids=[1, 2], images=[images[0]]),
        GenerationRequest([{"role": "user", "content": [{"type": "image", "image": "/no/file"}]}]),
    ]
    ok, bad_sampling, bad_images, missing = hf_engine.generate(requests)
    assert ok.error is None and len(ok.token_ids) == 3
    assert bad_sampling.finish_reason == "error" and "temperature=-1" in bad_sampling.error
    assert bad_images.finish_reason == "error" and "image token runs" in bad_images.error
    assert missing.finish_reason == "error" and "/no/file" in missing.error


def test_seed_makes_sampling_reproducible(hf_engine):
    def sample(seed):
        params = SamplingParams(temperature=1.0, max_new_tokens=10, seed=seed)
        return hf_engine.generate([GenerationRequest([user_turn("q")], params)])[0].token_ids

    assert sample(5) == sample(5)
    assert sample(5) != sample(6)


def test_update_weights_zero_gives_uniform_logprobs(tiny_dir):
    engine = HFEngine(tiny_dir("qwen2_vl"))
    zeros = {k: torch.zeros_like(v) for k, v in engine.model.state_dict().items()}
    assert engine.load_weights(zeros) == len(zeros)
    assert all(p.abs().sum() == 0 for p in engine.model.parameters())
    sampled = SamplingParams(temperature=1.0, max_new_tokens=4, seed=0)
    [result] = engine.generate([GenerationRequest([user_turn("q")], sampled)])
    vocab = engine.model.get_output_embeddings().weight.shape[0]
    # all-zero weights give all-zero logits: every token has probability 1 / vocab
    assert len(result.logprobs) == len(result.token_ids) > 0
    assert result.logprobs == pytest.approx([-math.log(vocab)] * len(result.logprobs), abs=1e-6)
    with pytest.raises(ValueError, match="not a weight of this model"):
        engine.update_weights([("no.such.weight", torch.zeros(1))])


def test_text_only_checkpoint(tiny_dir, tmp_path):
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir("qwen2_vl"))
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        pad_token_id=tokenizer.pad_token_id,
    )
    Qwen2ForCausalLM(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    engine = HFEngine(tmp_path)
    assert engine.tokenizer.processor is None
    [result] = engine.generate([GenerationRequest([user_turn("text only")], greedy(5))])
    assert result.error is None and len(result.token_ids) == len(result.logprobs) == 5
