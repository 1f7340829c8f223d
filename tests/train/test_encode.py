"""Loss masks from segments: generated tokens only; prompts, observations, image tokens never.

Expected positions are derived from the segment lengths by hand, not from the code under test.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from beacon.agent.transcript import parse_prompt_text
from beacon.fakes.trajectories import scripted_trajectory
from beacon.images import ImageStore
from beacon.train.core.encode import encode_trajectory
from beacon.types import Segment, Trajectory


def _expected_mask(traj: Trajectory) -> list[int]:
    mask: list[int] = []
    for segment in traj.segments:
        mask += [1 if segment.role == "generated" else 0] * len(segment.token_ids)
    return mask


def test_mask_is_exactly_the_generated_segments(tiny_tokenizer: Any, tmp_path) -> None:
    store = ImageStore(tmp_path)
    traj = scripted_trajectory(tiny_tokenizer, store, seed=3, tool_calls=2)
    encoded = encode_trajectory(traj, tiny_tokenizer, store.get)
    assert encoded.input_ids == traj.token_ids
    assert encoded.loss_mask == _expected_mask(traj)
    roles = [s.role for s in traj.segments]
    assert roles == ["prompt", *["generated", "generated", "observation"] * 2, "generated"]
    # first target is the first token after the prompt; the observation right after the
    # second generated segment is all zeros, and the tokens after it are targets again
    lengths = [len(s.token_ids) for s in traj.segments]
    start_obs = sum(lengths[:3])
    assert encoded.loss_mask[lengths[0] - 1 : lengths[0] + 1] == [0, 1]
    assert encoded.loss_mask[start_obs - 1 : start_obs + 1] == [1, 0]
    assert set(encoded.loss_mask[start_obs : start_obs + lengths[3]]) == {0}
    assert encoded.loss_mask[start_obs + lengths[3]] == 1
    assert encoded.images == [k for s in traj.segments for k in s.images]


def test_image_tokens_never_carry_loss(tiny_tokenizer: Any, tmp_path) -> None:
    store = ImageStore(tmp_path)
    traj = scripted_trajectory(tiny_tokenizer, store, seed=1, tool_calls=1)
    encoded = encode_trajectory(traj, tiny_tokenizer, store.get)
    image_id = tiny_tokenizer.image_token_id
    assert image_id in encoded.input_ids
    vision = set(tiny_tokenizer.vision_token_ids)
    assert all(
        m == 0 for t, m in zip(encoded.input_ids, encoded.loss_mask, strict=True) if t in vision
    )
    # even a generated segment that (wrongly) holds vision tokens gives them no loss
    word = tiny_tokenizer.encode("the")[0]
    bad = Segment(role="generated", text="x", token_ids=[image_id, word, *vision])
    traj.segments.append(bad)
    encoded = encode_trajectory(traj, tiny_tokenizer, store.get)
    assert encoded.loss_mask[-len(bad.token_ids) :] == [0, 1] + [0] * len(vision)


def test_text_trajectory_tokenized_for_the_student_keeps_boundaries(
    tiny_tokenizer: Any, tmp_path
) -> None:
    """An expert's text-only trajectory gives the ids and masks the agent loop would have."""
    store = ImageStore(tmp_path)
    with_ids = scripted_trajectory(tiny_tokenizer, store, seed=5, tool_calls=2, filler_words=4)
    text_only = scripted_trajectory(
        tiny_tokenizer, store, seed=5, tool_calls=2, filler_words=4, with_ids=False
    )
    assert not text_only.has_token_ids
    a = encode_trajectory(with_ids, tiny_tokenizer, store.get)
    b = encode_trajectory(text_only, tiny_tokenizer, store.get)
    assert b.input_ids == a.input_ids
    assert b.loss_mask == a.loss_mask == _expected_mask(with_ids)
    assert b.images == a.images


def test_text_trajectory_with_images_needs_a_store(tiny_tokenizer: Any, tmp_path) -> None:
    store = ImageStore(tmp_path)
    text_only = scripted_trajectory(tiny_tokenizer, store, seed=2, with_ids=False)
    with pytest.raises(ValueError, match=r"data\.images"):
        encode_trajectory(text_only, tiny_tokenizer, None)


def test_hinted_trajectory_trains_on_the_original_prompt(tiny_tokenizer: Any, tmp_path) -> None:
    store = ImageStore(tmp_path)
    traj = scripted_trajectory(tiny_tokenizer, store, seed=4)
    original = traj.segments[0]
    traj.original_prompt = original
    traj.segments[0] = Segment(role="prompt", text="hinted", token_ids=[7, 8, 9])
    encoded = encode_trajectory(traj, tiny_tokenizer, store.get)
    assert encoded.input_ids[: len(original.token_ids)] == original.token_ids


def test_parse_prompt_text_splits_roles_and_images() -> None:
    messages = parse_prompt_text("system: be brief\nuser: <image>What is\nthis?")
    assert messages == [
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
        {
            "role": "user",
            "content": [{"type": "image"}, {"type": "text", "text": "What is\nthis?"}],
        },
    ]


def test_text_segments_count_image_tokens_from_the_file_header(tiny_tokenizer, tmp_path) -> None:
    """Records of an HTTP expert carry text, not token ids: the tokenizer places each image's
    tokens from its size, which `ImageStore.header` reads without decoding a pixel."""
    store = ImageStore(tmp_path)
    traj = scripted_trajectory(tiny_tokenizer, store, seed=1, tool_calls=1)
    text_only = replace(
        traj, segments=[replace(s, token_ids=[], loss_mask=[]) for s in traj.segments]
    )
    decoded = encode_trajectory(text_only, tiny_tokenizer, store.get)
    assert tiny_tokenizer.image_token_id in decoded.input_ids
    assert encode_trajectory(text_only, tiny_tokenizer, store.header) == decoded
    key = traj.segments[0].images[0]
    header = store.header(key)
    assert (header.size, header.mode) == (store.get(key).size, store.get(key).mode)
