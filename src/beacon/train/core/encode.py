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
vision-bracket tokens are 0 even inside a generated segment. A generated text segment has no
per-token mask: its `loss_mask` is one value for all its tokens (`[0]`: context, not a target),
and empty means 1. A hinted trajectory (HGCE) trains
on its `original_prompt` when it has one.
A text prompt is parsed back into chat messages by `beacon.agent.transcript`, the module that
writes that text form.

Sequences: From a trajectory to the token sequence GRPO trains on, with HGCE's prompt swap.

Token-in, token-out: the response tokens are the trajectory's own ids, never re-tokenized.

A normal trajectory trains on exactly what was sampled. An HGCE trajectory (mode "hinted", paper
§3 "Hint-Guided Capability Expansion"; beacon.md §4 step 4) was sampled after the hinted prompt
(its first segment) and trains after the original prompt (`Trajectory.original_prompt`):

    training ids = original prompt + response   -> new log-probs log π_θ(o_t | q, o_<t)
    sampling ids = hinted prompt + response     -> old log-probs log π_old(o_t | q + hint, o_<t)

so the importance ratio is r_t = π_θ(o_t | q, o_<t) / π_old(o_t | q + hint, o_<t). The response
occupies positions [prompt_length, L) of the training ids and [sampling_prompt_length, L') of the
sampling ids; `align_old_logprobs` moves log-probs from the second layout to the first.

Log-prob layout used throughout `beacon.train.grpo`: logp[t] = log p(ids[t] | ids[:t]) for t >= 1,
and logp[0] = 0 (see `token_logprobs`), so a log-prob sits at the position of its token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from PIL import Image
from torch import Tensor

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
            seg_mask = (
                list(segment.loss_mask)
                if segment.token_ids
                else text_loss_mask(segment, len(seg_ids), traj.sample_id)
            )
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


def text_loss_mask(segment: Segment, count: int, sample_id: str) -> list[int]:
    """The loss mask of a generated text segment (no token ids, so no per-token mask): one
    value for all its `count` tokens, 1 when `loss_mask` is empty. `loss_mask=[0]` keeps a
    generated segment in the context without training on it: a student-like prefix the
    demo's wrong-path teacher rows continue from (`beacon.demo.told_rows`)."""
    values = set(segment.loss_mask)
    if len(values) > 1:
        raise ValueError(
            f"trajectory {sample_id}: a text segment (no token ids) has the loss mask "
            f"{segment.loss_mask}; it takes one value for the whole segment ([0] or [1])"
        )
    return [int(values.pop()) if values else 1] * count


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


@dataclass(frozen=True)
class TrainingSequence:
    """One response laid out for the loss.

    token_ids / loss_mask: the training input (prompt + response) and 1 on generated tokens.
    sampling_ids: the ids the response was sampled after (equal to token_ids unless hinted).
    prompt_length / sampling_prompt_length: where the response starts in each.
    sampler_logprobs: the engine's log-probs placed on token_ids positions (0 elsewhere), or None
    when some generated segment has none. images: image keys in input order (prompt first).
    hinted: True when the prompt was swapped (HGCE).
    """

    token_ids: list[int]
    loss_mask: list[int]
    sampling_ids: list[int]
    prompt_length: int
    sampling_prompt_length: int
    sampler_logprobs: list[float] | None
    images: list[str]
    hinted: bool

    @property
    def response_length(self) -> int:
        return len(self.token_ids) - self.prompt_length


def training_sequence(trajectory: Trajectory) -> TrainingSequence:
    """The training layout of `trajectory`; swaps in the original prompt when it was hinted.

    Raises ValueError for trajectories without token ids (hosted engines), without a prompt
    segment, or hinted without `original_prompt`.
    """
    segments = trajectory.segments
    if not segments or segments[0].role != "prompt":
        raise ValueError(
            f"trajectory {trajectory.sample_id!r} does not start with a prompt segment"
        )
    if not trajectory.has_token_ids:
        raise ValueError(
            f"trajectory {trajectory.sample_id!r} has no token ids (a text-only engine made it); "
            "GRPO rollouts need an engine that returns token ids (hf, vllm, beacon serve)"
        )
    hinted = trajectory.mode == "hinted" or trajectory.original_prompt is not None
    if hinted and trajectory.original_prompt is None:
        raise ValueError(
            f"hinted trajectory {trajectory.sample_id!r} has no original_prompt, so HGCE cannot "
            "train it without the hint; record it with the agent loop's hinted mode"
        )
    sampled_prompt = segments[0]
    prompt = trajectory.original_prompt if hinted else sampled_prompt
    response = segments[1:]
    response_ids = [t for s in response for t in s.token_ids]
    response_mask = [m for s in response for m in s.loss_mask]
    images = list(prompt.images) + [k for s in response for k in s.images]
    return TrainingSequence(
        token_ids=list(prompt.token_ids) + response_ids,
        loss_mask=[0] * len(prompt.token_ids) + response_mask,
        sampling_ids=list(sampled_prompt.token_ids) + response_ids,
        prompt_length=len(prompt.token_ids),
        sampling_prompt_length=len(sampled_prompt.token_ids),
        sampler_logprobs=_sampler_logprobs(trajectory, len(prompt.token_ids)),
        images=images,
        hinted=hinted,
    )


def code_digit_mask(trajectory: Trajectory, decode: Callable[[list[int]], str]) -> list[bool]:
    """Per token of `training_sequence(trajectory).token_ids` (the original prompt when hinted):
    True on a generated code token whose text (`decode([id])`) holds a digit. These are the crop
    coordinates a tool call writes, the decisive tokens of a crop: which box it takes."""
    hinted = trajectory.original_prompt is not None
    prompt = trajectory.original_prompt if hinted else trajectory.segments[0]
    flags = [False] * len(prompt.token_ids)
    for segment in trajectory.segments[1:]:
        code = segment.role == "generated" and segment.kind == "code"
        flags.extend(
            code and any(ch.isdigit() for ch in decode([token])) for token in segment.token_ids
        )
    return flags


def without_hint(trajectory: Trajectory) -> Trajectory:
    """The hinted trajectory with its original prompt in front: what the policy trains on.

    For a batching step that takes whole trajectories (images, M-RoPE positions): new log-probs
    come from `without_hint(t)`, old log-probs from `t` itself (hinted), moved onto the new
    positions with `align_old_logprobs(old, training_sequence(t))`. The result has mode "tool",
    no `original_prompt`, and keeps `hint` as the record of what the sampler saw. Un-hinted
    trajectories come back unchanged.
    """
    if trajectory.original_prompt is None:
        if trajectory.mode == "hinted":
            raise ValueError(
                f"hinted trajectory {trajectory.sample_id!r} has no original_prompt; record it "
                "with the agent loop's hinted mode"
            )
        return trajectory
    return replace(
        trajectory,
        mode="tool",
        segments=[trajectory.original_prompt, *trajectory.segments[1:]],
        original_prompt=None,
    )


def _sampler_logprobs(trajectory: Trajectory, prompt_length: int) -> list[float] | None:
    out = [0.0] * prompt_length
    for segment in trajectory.segments[1:]:
        if segment.role == "generated":
            if segment.logprobs is None or len(segment.logprobs) != len(segment.token_ids):
                return None
            out.extend(segment.logprobs)
        else:
            out.extend([0.0] * len(segment.token_ids))
    return out


def align_old_logprobs(sampling_logprobs: Tensor, sequence: TrainingSequence) -> Tensor:
    """Move per-token log-probs of `sampling_ids` onto the positions of `token_ids`.

    sampling_logprobs: [L'] from a forward over `sequence.sampling_ids` (for HGCE, the hinted
    prompt). Returns [L] aligned to `sequence.token_ids`, zero on the prompt positions:
    out[prompt_length + j] = sampling_logprobs[sampling_prompt_length + j].
    """
    if sampling_logprobs.shape != (len(sequence.sampling_ids),):
        raise ValueError(
            f"expected log-probs of shape ({len(sequence.sampling_ids)},) over sampling_ids, got "
            f"{tuple(sampling_logprobs.shape)}"
        )
    response = sampling_logprobs[sequence.sampling_prompt_length :]
    prompt = sampling_logprobs.new_zeros(sequence.prompt_length)
    return torch.cat([prompt, response])


def token_logprobs(logits: Tensor, token_ids: Tensor, temperature: float = 1.0) -> Tensor:
    """logp[b, t] = log softmax(logits[b, t-1] / T)[token_ids[b, t]], logp[b, 0] = 0.

    logits: [B, L, V] from a causal forward over token_ids [B, L]. Old log-probs are recomputed
    with this at T = 1 under the training forward (the sampler's per-segment temperatures, e.g.
    code at 0.0, make its own log-probs those of another distribution).
    """
    scaled = logits[:, :-1]
    if scaled.dtype in (torch.float16, torch.bfloat16):
        scaled = scaled.float()
    scaled = scaled / temperature
    picked = scaled.gather(-1, token_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    logp = picked - torch.logsumexp(scaled, dim=-1)
    return torch.cat([logp.new_zeros(logp.shape[0], 1), logp], dim=1)
