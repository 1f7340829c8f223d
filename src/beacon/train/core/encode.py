"""Trajectories to training sequences: token ids, a loss mask, and the images in order.

Two sources, one result (`EncodedTrajectory`):

1. Trajectories with exact token ids (our own policy) are used as they are: the ids are
   concatenated segment by segment and nothing is re-tokenized (token-in, token-out).
2. Text trajectories (an expert behind a hosted API returns no ids) are tokenized for the student
   one segment at a time, exactly as the agent loop would have tokenized them: the prompt is
   rendered with the student's chat template (`ChatTokenizer.render_chat`), generated text is
   encoded as is, and observations are encoded on their own with their images. Tokenizing per
   segment keeps every boundary, so the loss mask stays exact.

The loss mask is `Segment.loss_mask` on generated segments and 0 everywhere else; image and
vision-bracket tokens are 0 even inside a generated segment. A hinted trajectory (HGCE) trains
on its `original_prompt` when it has one.
A text prompt is parsed back into chat messages by `beacon.agent.transcript`, the module that
writes that text form.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from beacon.agent.transcript import TEXT_IMAGE_PLACEHOLDER, parse_prompt_text
from beacon.types import Segment, Trajectory


@dataclass
class EncodedTrajectory:
    """One training sequence. `loss_mask[i]` is 1 where token i is a target; `images` are
    ImageStore keys in the order their tokens appear."""

    sample_id: str
    input_ids: list[int]
    loss_mask: list[int]
    images: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def num_loss_tokens(self) -> int:
        return sum(self.loss_mask)


def encode_trajectory(
    traj: Trajectory,
    tokenizer: Any,
    load_image: Callable[[str], Image.Image] | None = None,
) -> EncodedTrajectory:
    """The training sequence of `traj`; text segments are tokenized with `tokenizer`.

    `tokenizer` is a `ChatTokenizer` (`beacon.engines.tokenizer.HFTokenizer`); `load_image`
    turns an image key into a PIL image and is needed only for text segments with images. Only
    the images' sizes are read (how many tokens each becomes), so `ImageStore.header`, which
    decodes no pixels, is enough.
    """
    segments = list(traj.segments)
    if traj.original_prompt is not None and segments and segments[0].role == "prompt":
        segments[0] = traj.original_prompt
    ids: list[int] = []
    mask: list[int] = []
    images: list[str] = []
    blocked = set(getattr(tokenizer, "vision_token_ids", ()) or ())
    for segment in segments:
        seg_ids = segment.token_ids or _tokenize_segment(segment, tokenizer, load_image)
        if segment.role == "generated":
            seg_mask = list(segment.loss_mask) if segment.token_ids else [1] * len(seg_ids)
            if len(seg_mask) != len(seg_ids):
                raise ValueError(
                    f"trajectory {traj.sample_id}: a generated segment has {len(seg_ids)} ids "
                    f"but {len(seg_mask)} loss-mask entries; the record is corrupt"
                )
            seg_mask = [
                0 if t in blocked else int(m) for t, m in zip(seg_ids, seg_mask, strict=True)
            ]
        else:
            seg_mask = [0] * len(seg_ids)
        ids.extend(seg_ids)
        mask.extend(seg_mask)
        images.extend(segment.images)
    return EncodedTrajectory(sample_id=traj.sample_id, input_ids=ids, loss_mask=mask, images=images)


def _tokenize_segment(
    segment: Segment, tokenizer: Any, load_image: Callable[[str], Image.Image] | None
) -> list[int]:
    if not segment.text:
        return []
    images = _segment_images(segment, load_image)
    if segment.role == "prompt":
        messages = parse_prompt_text(segment.text)
        text = tokenizer.render_chat(messages, add_generation_prompt=True)
        return tokenizer.encode(text, images)
    text = segment.text.replace(TEXT_IMAGE_PLACEHOLDER, tokenizer.image_placeholder)
    return tokenizer.encode(text, images)


def _segment_images(
    segment: Segment, load_image: Callable[[str], Image.Image] | None
) -> list[Image.Image]:
    if not segment.images:
        return []
    if load_image is None:
        raise ValueError(
            "a text segment has images but no image store was given; set data.images to the "
            "ImageStore folder of these trajectories"
        )
    return [load_image(key) for key in segment.images]


def check_image_tokens(
    encoded: EncodedTrajectory, image_token_id: int, grid_tokens: Sequence[int]
) -> None:
    """Raise if the sequence's image tokens do not match its images' token counts."""
    found = sum(1 for t in encoded.input_ids if t == image_token_id)
    if found != sum(grid_tokens):
        raise ValueError(
            f"trajectory {encoded.sample_id}: {found} image tokens in the ids but its "
            f"{len(grid_tokens)} images need {sum(grid_tokens)}; the ids were made with another "
            "processor than model.path's"
        )
