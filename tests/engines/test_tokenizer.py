"""HFTokenizer: rendering, and ids identical to what the processor gives the model."""

from __future__ import annotations

import pytest

from beacon.engines.tiny import ARCHS, IMAGE_PLACEHOLDER
from beacon.engines.tokenizer import HFTokenizer

from .helpers import thyme_observation_chat, user_turn


@pytest.fixture(scope="module")
def tok(tiny_dir) -> HFTokenizer:
    return HFTokenizer.from_pretrained(tiny_dir("qwen2_vl"))


@pytest.mark.parametrize("arch", ARCHS)
def test_encode_matches_the_processor(arch, tiny_dir, images):
    tok = HFTokenizer.from_pretrained(tiny_dir(arch))
    chat = thyme_observation_chat(images[0], images[1])
    text = tok.render_chat(chat, continue_final_message=True)
    expected = tok.processor(text=[text], images=images[:2], return_tensors="pt")["input_ids"][0]
    assert tok.encode(text, images[:2]) == expected.tolist()


def test_render_generation_prompt(tok, images):
    text = tok.render_chat([user_turn("Hi?", images[0])])
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        f"<|im_start|>user\n{IMAGE_PLACEHOLDER}Hi?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_render_continue_final_message_ending_in_an_image(tok, images):
    chat = thyme_observation_chat(images[0], images[1])
    chat[-1]["content"] = chat[-1]["content"][:2]  # ends with the observation image
    text = tok.render_chat(chat, continue_final_message=True)
    assert text.endswith(
        f"<|im_start|>assistant\n<code>\n```python\nprint(image.size)\n```\n"
        f"</code><sandbox_output>(300, 200){IMAGE_PLACEHOLDER}"
    )


def test_render_tool_turn(tok):
    chat = [{"role": "user", "content": "q"}, {"role": "tool", "content": "3"}]
    text = tok.render_chat(chat)
    assert "<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>\n" in text


def test_each_image_expands_to_its_own_token_count(tok, images):
    counts = [tok.image_token_count(im) for im in images]
    ids = tok.encode(IMAGE_PLACEHOLDER * 3, images)
    assert ids.count(tok.image_token_id) == sum(counts)
    assert len(set(counts)) > 1  # the fixture images differ in size, so this is a real check


def test_placeholder_count_mismatch_is_an_error(tok, images):
    with pytest.raises(ValueError, match="1 image placeholders but 2 images"):
        tok.encode(IMAGE_PLACEHOLDER, images[:2])


def test_decode_round_trips_text(tok):
    text = "<answer>7</answer><|im_end|>"
    assert tok.decode(tok.encode(text)) == text
    assert tok.eos_token_ids == sorted(
        {tok.tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
    )


def test_text_only_checkpoint(tiny_dir, tmp_path):
    from transformers import AutoTokenizer, Qwen2Config

    AutoTokenizer.from_pretrained(tiny_dir("qwen2_vl")).save_pretrained(tmp_path)
    Qwen2Config(hidden_size=16, num_hidden_layers=1, num_attention_heads=2).save_pretrained(
        tmp_path
    )
    tok = HFTokenizer.from_pretrained(tmp_path)
    assert tok.processor is None and tok.image_placeholder == ""
    text = tok.render_chat([{"role": "user", "content": "hello"}])
    assert text.endswith("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n")
    assert tok.decode(tok.encode(text)) == text


def test_continue_a_plain_string_assistant_message(tok):
    chat = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<answer>4"}]
    assert tok.render_chat(chat, continue_final_message=True).endswith(
        "<|im_end|>\n<|im_start|>assistant\n<answer>4"
    )
    assert tok.render_chat(chat, add_generation_prompt=False).endswith(
        "<|im_start|>assistant\n<answer>4<|im_end|>\n"
    )
