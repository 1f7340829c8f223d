"""OPD sequences and scoring: the student's exact tokens under the teacher (base and conditioned,
with the conditioning itself: reflection text, conditioned chat, token alignment check) and the
student's logits on the teacher's support.

Supervised positions T_i are the positions t with loss_mask[t] = 1 (every generated token, image
tokens excluded, as `beacon.train.core.encode` masks them); the state at t - 1 predicts token t.

Teacher conditioning (Appendix A.3), as done here:
1. The base teacher scores the student's sequence as it is (same ids, same images): the teacher
   must share the student's vocabulary, checked once when the run starts.
2. The conditioned prompt is rebuilt from the item (`beacon.agent.prompts.first_turn` with the
   image paths read back from the student's prompt) and must render to the student's prompt text
   exactly; then `condition_messages` adds the reflection text and support images, and the
   student's completion ids follow it unchanged.
3. With `teacher.reencode_check`, every non-prompt segment is re-encoded from its text with the
   teacher tokenizer and must give the student's ids (`check_alignment`); a sampled
   non-canonical tokenization fails this and the trajectory keeps the base teacher ("misaligned").

The reflection-conditioned teacher sees the student's exact history with two additions to the
first user message: the reflection text, and the anchor's support images inserted right after
the original image(s), hence before every image the trajectory produced (those live in later
observation messages). The paper appends the text at the message's end (`position="end"`);
`position="before_question"` puts it after the images, before the question, so the question
stays next to the answer: a model that copies from the question by relative position (a crop's
coordinates) copies as it did without the reflection. A misaligned trajectory (point 3) keeps
the base teacher because q^R would score other tokens (u_i = 0). `condition_messages` works on
the chat structure of `beacon.engines.base.Message` and never mutates its input.

Both teacher passes and the student use the models' final hidden states and output projection
(`teacher_topk`, `support_logits`): no [T, V] tensor is kept. The student's sampled-token
log-probs and entropies (health metrics) are reduced from the same hidden states in chunks.

Every score is computed inside one forward of the model's root module, the student's being the
model `accelerator.prepare` returned: `logits_to_keep` selects the hidden states before the
supervised positions, and the output projection's forward is, for that call, the scoring
function (`SequenceScorer.project`). So the projection runs where the launch has its weights in
place: FSDP2 keeps the root's parameters (embeddings, final norm, `lm_head`) gathered from the
root's forward to its backward, ZeRO-3 gathers `lm_head`'s in that module's own pre-forward hook,
and DDP sees the loss come out of its wrapper's forward, as SFT's and GRPO's do. Calling the inner
model or the projection's weight outside the root forward would read shards under both.

Health: OPD's health numbers (docs/train.md, "Guard rails"): per trajectory, sums over its
supervised tokens; per step, their means.

    health/sampler_logprob_gap   mean |log π_sampler(y_t) − log π_student(y_t)|
    health/entropy               mean entropy of the student's next-token distribution
    health/teacher_student_gap   mean log π_student(y_t) − log q^0(y_t), the base teacher

The teacher-student gap is the k1 estimate of the reverse KL(π ‖ q^0) on the student's own
samples, over the full vocabulary (the loss sees only the teacher's top-K support): it falls as
the student learns the teacher, and a rise means the student drifts away from it.
"""

from __future__ import annotations

import copy
import math
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from PIL import Image
from torch import Tensor

from beacon.agent.formats import get_format
from beacon.agent.prompts import first_turn
from beacon.images import load_image
from beacon.train.core.collate import PixelCache, collate
from beacon.train.core.encode import EncodedTrajectory, training_sequence
from beacon.train.core.health import TokenHealth, chunked_logprob_entropy, logprob_gap_sum
from beacon.train.opd.assemble import Reflection
from beacon.train.opd.revue_loss import TeacherScores, support_logits, teacher_topk
from beacon.types import Sample, Trajectory

REFLECTION_HEADER = "Reflection on visual evidence (training-time guidance for the teacher):"


def reflection_text(reflection: Reflection) -> str:
    """R_i rendered for the teacher prompt: Anchor (if any), then Break Point."""
    lines = [REFLECTION_HEADER]
    anchor = reflection.anchor
    if anchor is not None:
        n = len(anchor.support_image_keys)
        where = f"{n} supporting image(s) placed after the original image" if n else "the original"
        lines += [
            f"Anchor evidence: {where}.",
            f"Query slot: {anchor.reading.query_slot}",
            f"Observed value: {anchor.reading.observed_value}",
            f"Visual fact: {anchor.reading.visual_fact}",
            f"Grounding rule: {anchor.grounding.rule}",
        ]
    b = reflection.break_point
    if b.stage == "CORRECT":
        lines.append("Break point: none; this attempt's final answer is correct.")
    else:
        lines.append(f"Break point: first broken link {b.stage}. Discrepancy: {b.discrepancy}")
    return "\n".join(lines)


POSITIONS = ("end", "before_question")
"""Where the reflection text goes in the first user message (module docstring)."""


def condition_messages(
    messages: Sequence[dict[str, Any]],
    text: str,
    support_images: Sequence[Image.Image] = (),
    position: str = "end",
) -> list[dict[str, Any]]:
    """A copy of `messages` with `text` and `support_images` added to the first user message,
    the text at `position` (one of `POSITIONS`)."""
    if position not in POSITIONS:
        raise ValueError(f"reflection position {position!r}; choose one of {POSITIONS}")
    out = [dict(m) for m in messages]
    index = next((i for i, m in enumerate(out) if m["role"] == "user"), None)
    if index is None:
        raise ValueError("the teacher prompt has no user message to append the reflection to.")
    content = out[index]["content"]
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else copy.copy(content)
    last_image = max((i for i, p in enumerate(parts) if p.get("type") == "image"), default=-1)
    images = [{"type": "image", "image": im} for im in support_images]
    parts[last_image + 1 : last_image + 1] = images
    if position == "end":
        parts.append({"type": "text", "text": "\n\n" + text})
    else:
        parts.insert(last_image + 1 + len(images), {"type": "text", "text": text + "\n\n"})
    out[index] = {**out[index], "content": parts}
    return out


@dataclass(frozen=True)
class AlignmentCheck:
    """Whether the teacher's completion ids equal the student's, and where they first differ."""

    aligned: bool
    reason: str | None = None
    first_mismatch: int | None = None


def check_alignment(student_ids: Sequence[int], teacher_ids: Sequence[int]) -> AlignmentCheck:
    """Exact token-id and length equality of the completion (Appendix A.3)."""
    pairs = enumerate(zip(student_ids, teacher_ids, strict=False))
    first = next((i for i, (a, b) in pairs if a != b), None)
    if first is not None:
        return AlignmentCheck(False, f"token {first} differs", first)
    if len(student_ids) != len(teacher_ids):
        reason = f"length {len(teacher_ids)} != student's {len(student_ids)}"
        return AlignmentCheck(False, reason, min(len(student_ids), len(teacher_ids)))
    return AlignmentCheck(True)


def check_reencoding(
    teacher_ids: Sequence[int], prompt_length: int, student_completion_ids: Sequence[int]
) -> AlignmentCheck:
    """Check a re-encoded conditioned sequence: its part after `prompt_length` tokens must equal
    the student's completion ids."""
    return check_alignment(student_completion_ids, teacher_ids[prompt_length:])


_IMAGE_PATH = re.compile(r'### User Image Path: "([^"]*)"')


@dataclass
class Conditioned:
    """The reflection-conditioned sequence of one trajectory, or why there is none."""

    encoded: EncodedTrajectory | None
    alignment: AlignmentCheck


@dataclass
class StudentScores:
    """The student on the supervised positions of one sequence: its logits on the teacher's
    support [T, K] (differentiable), and measured without gradient the full-vocabulary
    log-prob of each sampled token [T] and the entropy of each distribution [T]."""

    support_logits: Tensor
    sampled_logprob: Tensor
    entropy: Tensor


def supervised_positions(encoded: EncodedTrajectory) -> Tensor:
    """Indices t >= 1 of supervised tokens (the state at t - 1 predicts them)."""
    mask = torch.tensor(encoded.loss_mask, dtype=torch.bool)
    mask[0] = False
    return mask.nonzero().squeeze(-1)


def first_divergence(encoded: EncodedTrajectory, reference: EncodedTrajectory) -> int | None:
    """Where `encoded` first leaves `reference`, a continuation of the same prompt: the index
    into `supervised_positions(encoded)` of the first token that differs, or None when the ids
    agree up to the shorter one's end or first differ at a token `encoded` does not supervise
    (its prompt, an observation)."""
    ids, ref = encoded.input_ids, reference.input_ids
    first = next((t for t, (a, b) in enumerate(zip(ids, ref, strict=False)) if a != b), None)
    if first is None or first == 0 or not encoded.loss_mask[first]:
        return None
    return int((supervised_positions(encoded) < first).sum())


class SequenceScorer:
    """Scores of one model on one encoded sequence (images through `pixels`), each from one
    forward of `model` (module docstring). `model` is what is called: the prepared student (a
    DDP / FSDP / DeepSpeed wrapper), or a plain teacher; `inner` is the module that owns the
    output projection (`accelerator.unwrap_model(model)`; `model` itself by default)."""

    def __init__(
        self, model: Any, tokenizer: Any, pixels: PixelCache | None, inner: Any = None
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.pixels = pixels
        self.head = (model if inner is None else inner).get_output_embeddings()
        # the projection is swapped for each call, and a teacher server answers on many threads
        self._lock = threading.Lock()

    def project(
        self, encoded: EncodedTrajectory, positions: Tensor, fn: Callable[[Tensor, Any], Tensor]
    ) -> Tensor:
        """`fn(hidden, head)` run as the output projection of one forward over `encoded`:
        `hidden` [T, H] the final (normed) hidden states at `positions`, `head` the projection
        module, its weights in place; the forward's logits (what `fn` returned: a new tensor,
        not a view, as FSDP2 hangs its pre-backward hook on the forward's output) come back."""
        batch = collate(
            [encoded], self.tokenizer.pad_token_id, self.tokenizer.image_token_id, self.pixels
        )
        device = self.head.weight.device
        inputs = batch.to(device).model_inputs()
        with self._lock:
            self.head.forward = lambda hidden: fn(hidden[0], self.head)
            try:
                out = self.model(**inputs, logits_to_keep=positions.to(device))
            finally:
                del self.head.forward
        return out.logits

    @torch.no_grad()
    def teacher_scores(self, encoded: EncodedTrajectory, k: int, chunk_size: int) -> TeacherScores:
        """`teacher_topk` on the supervised positions of `encoded`."""
        positions = supervised_positions(encoded)
        ids = torch.tensor(encoded.input_ids)[positions]
        scores: list[TeacherScores] = []

        def topk(hidden: Tensor, head: Any) -> Tensor:
            scores.append(
                teacher_topk(hidden, head.weight, ids.to(hidden.device), k, chunk_size, head.bias)
            )
            return hidden.new_zeros(0)

        self.project(encoded, positions - 1, topk)
        return scores[0]

    def student_scores(
        self, encoded: EncodedTrajectory, support_ids: Tensor, chunk_size: int
    ) -> StudentScores:
        """One forward of the student: its logits on the adopted teacher's support (the
        forward's output, so the launch's backward hooks see the loss) and, for the health
        metrics, its sampled tokens' log-probs and entropies."""
        positions = supervised_positions(encoded)
        ids = torch.tensor(encoded.input_ids)[positions]
        health: list[tuple[Tensor, Tensor]] = []

        def support(hidden: Tensor, head: Any) -> Tensor:
            on = ids.to(hidden.device)  # measured without gradient
            health.append(chunked_logprob_entropy(hidden, head.weight, on, chunk_size, head.bias))
            ids_on = support_ids.to(hidden.device)
            return support_logits(hidden, head.weight, ids_on, head.bias, chunk_size)

        logits = self.project(encoded, positions - 1, support)
        return StudentScores(logits, *health[0])


def conditioned_sequence(
    trajectory: Trajectory,
    encoded: EncodedTrajectory,
    sample: Sample,
    text: str,
    support_keys: Sequence[str],
    tokenizer: Any,
    load_key: Callable[[str], Image.Image],
    reencode_check: bool = True,
    position: str = "end",
) -> Conditioned:
    """The teacher's conditioned sequence for `trajectory` (see the module docstring)."""
    prompt = trajectory.segments[0]
    images = [load_image(source) for source in sample.images]
    messages = _rebuilt_prompt(trajectory, sample, images, tokenizer)
    if messages is None:
        return Conditioned(None, AlignmentCheck(False, "prompt does not rebuild from the item"))
    completion = encoded.input_ids[len(prompt.token_ids) :]
    if reencode_check:
        check = check_alignment(completion, _reencoded(trajectory, tokenizer, load_key))
        if not check.aligned:
            return Conditioned(None, check)
    support = [load_key(key) for key in support_keys]
    rendered = tokenizer.render_chat(
        condition_messages(messages, text, support, position), add_generation_prompt=True
    )
    prompt_ids = tokenizer.encode(rendered, [*images, *support])
    out = EncodedTrajectory(
        sample_id=encoded.sample_id,
        input_ids=prompt_ids + completion,
        loss_mask=[0] * len(prompt_ids) + encoded.loss_mask[len(prompt.token_ids) :],
        images=[*prompt.images, *support_keys, *encoded.images[len(prompt.images) :]],
    )
    return Conditioned(out, AlignmentCheck(True))


def _rebuilt_prompt(
    trajectory: Trajectory, sample: Sample, images: list[Image.Image], tokenizer: Any
) -> list[dict[str, Any]] | None:
    """The student's opening messages rebuilt from the item, or None if they render otherwise."""
    prompt = trajectory.segments[0]
    paths = _IMAGE_PATH.findall(prompt.text)
    tools = trajectory.mode != "notool"
    if tools and len(paths) != len(images):
        return None
    fmt = get_format(trajectory.format)
    messages = first_turn(sample.question, images, fmt=fmt, tools=tools, image_paths=paths)
    if tokenizer.render_chat(messages, add_generation_prompt=True) != prompt.text:
        return None
    return messages


def _reencoded(
    trajectory: Trajectory, tokenizer: Any, load_key: Callable[[str], Image.Image]
) -> list[int]:
    ids: list[int] = []
    for segment in trajectory.segments[1:]:
        images = [load_key(key) for key in segment.images]
        ids.extend(tokenizer.encode(segment.text, images))
    return ids


def trajectory_health(
    traj: Trajectory, encoded: EncodedTrajectory, student: StudentScores, base: TeacherScores
) -> list[float]:
    """Sums over the supervised tokens: |sampler − student| log-prob, entropy, and student −
    base-teacher log-prob (the teacher-student gap), with their token counts (`TokenHealth`
    order, then the gap's two)."""
    positions = supervised_positions(encoded)
    logp = student.sampled_logprob.cpu()
    sampler = training_sequence(traj).sampler_logprobs
    sampled = torch.full_like(logp, float("nan"))
    if sampler is not None:
        sampled = torch.tensor(sampler, dtype=logp.dtype)[positions]
    on = torch.ones_like(logp, dtype=torch.bool)
    gap, gap_tokens = logprob_gap_sum(logp, sampled, on)
    teacher = base.sampled_logprob.to(logp)
    health = TokenHealth(gap, gap_tokens, float(student.entropy.sum()), len(logp))
    return [*health.as_list(), float((logp - teacher).sum()), len(logp)]


def health_metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    """`health/sampler_logprob_gap`, `health/entropy` and `health/teacher_student_gap` (mean
    over supervised tokens of log π_student − log q^0_teacher of the sampled token) of the
    step's trajectories."""
    sums = [sum(r["health"][k] for r in records) for k in range(6)]
    gap = sums[4] / sums[5] if sums[5] else math.nan
    return {**TokenHealth.from_list(sums[:4]).as_metrics(), "health/teacher_student_gap": gap}
