"""The per-group record every RL component reads: one prompt's G responses, as booleans.

Rewards, group filtering, HGCE's trigger and the step statistics all work on whole groups (NAAR's
reward of one response depends on the other responses of its group), so they share this one
typed record instead of passing parallel lists around.

Difficulty: The blog variant's difficulty labels h ∈ {easy, hard} and its pitfall warnings (seed
001).

Labels come from an oracle and are used only for the reward, never shown to the model:

- from pass counts: notool correctness of the base model over k samples (the data pipeline's
  pass@k); easy when passes / attempts >= `easy_threshold` (default 0.5, the same rule as
  `beacon.metrics.adaptivity`);
- from confidence: a small model's max softmax probability of its answer; easy when it is
  > 0.85 (seed 001, "难度标注的轻量替代").

Pitfalls the blog lists ("常见坑") become warnings: a hard share below 20% leaves HGCE and the
β bonus nothing to act on (the blog recommends >= 30%), and a large γ makes the policy avoid
tools altogether ("tool phobia", P[tool | hard] collapses).

Format: R_format of the paper: every code block is followed by an observation, and the final answer
is
inside <answer>…</answer> (paper §3 "策略优化", the text under Eq. 1).

Read from the trajectory's structure, never by re-parsing answers (the agent's Format is the one
owner of answer extraction). What this relies on:

1. `Trajectory.final_answer` is set by the agent (only when an <answer>…</answer> was closed) and
   `finish_reason == "answer"` means the episode ended on it;
2. each tool call the agent recognised is one `ToolCall`, and each executed or rejected call got
   exactly one observation segment, directly after the generated segment that wrote it;
3. the format's own `call_open` tag (`beacon.agent.formats`) marks each code block the model
   opened, so a block that never got an observation (notool mode, an unclosed block before the
   answer) shows as more openings than observations.

A response passes when all of these hold; `format_check` also says which rule failed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from torch import Tensor

from beacon.agent.formats import get_format
from beacon.types import Trajectory

Difficulty = Literal["easy", "hard"]
"""The blog variant's difficulty label h of an item (from an oracle, never shown to the model)."""


@dataclass(frozen=True)
class GroupOutcomes:
    """Outcomes of the G responses one prompt got in one rollout group.

    `correct[i]`: response i's final answer verifies; `used_tool[i]`: it is code-using (wrote at
    least one tool call, see `group_outcomes`); `format_ok[i]`: it passes `format_check`.
    `label` is the item's difficulty label (blog reward only); `hinted` marks an HGCE group
    sampled with a hint.
    `response_tokens[i]` is response i's generated-token count (statistics only; may be empty).
    `truncated[i]`: a budget cut response i off before it answered (over-turn masking; may be
    empty: none was).
    `decision[i]`: response i's first crop holds the item's decision box (`decided`; empty:
    the item names no decision box).
    """

    correct: tuple[bool, ...]
    used_tool: tuple[bool, ...]
    format_ok: tuple[bool, ...]
    label: Difficulty | None = None
    hinted: bool = False
    response_tokens: tuple[int, ...] = field(default=())
    truncated: tuple[bool, ...] = field(default=())
    decision: tuple[bool, ...] = field(default=())

    def __post_init__(self) -> None:
        sizes = {len(self.correct), len(self.used_tool), len(self.format_ok)}
        if self.response_tokens:
            sizes.add(len(self.response_tokens))
        if self.truncated:
            sizes.add(len(self.truncated))
        if self.decision:
            sizes.add(len(self.decision))
        if len(sizes) != 1:
            raise ValueError(
                f"a group needs one correct / used_tool / format_ok flag per response, got "
                f"lengths {len(self.correct)}, {len(self.used_tool)}, {len(self.format_ok)}"
                + (
                    f" and {len(self.response_tokens)} response_tokens"
                    if self.response_tokens
                    else ""
                )
            )
        if not self.correct:
            raise ValueError("a group needs at least one response (rollout.group_size >= 1)")

    @classmethod
    def of(
        cls,
        correct: Sequence[bool],
        used_tool: Sequence[bool],
        format_ok: Sequence[bool] | None = None,
        **kwargs,
    ) -> GroupOutcomes:
        """Build from any sequences of booleans; `format_ok` defaults to all True."""
        flags = [True] * len(correct) if format_ok is None else format_ok
        if "response_tokens" in kwargs:
            kwargs["response_tokens"] = tuple(int(n) for n in kwargs["response_tokens"])
        for name in ("truncated", "decision"):
            if name in kwargs:
                kwargs[name] = tuple(bool(t) for t in kwargs[name])
        return cls(
            correct=tuple(bool(c) for c in correct),
            used_tool=tuple(bool(u) for u in used_tool),
            format_ok=tuple(bool(f) for f in flags),
            **kwargs,
        )

    @property
    def size(self) -> int:
        return len(self.correct)

    @property
    def complete(self) -> list[int]:
        """Indices of the responses no budget cut off."""
        return [i for i in range(self.size) if not (self.truncated and self.truncated[i])]

    def select(self, indices: Sequence[int]) -> GroupOutcomes:
        """The group of only the responses at `indices` (in that order)."""

        def pick(values: tuple) -> tuple:
            return tuple(values[i] for i in indices) if values else ()

        return GroupOutcomes(
            correct=pick(self.correct),
            used_tool=pick(self.used_tool),
            format_ok=pick(self.format_ok),
            label=self.label,
            hinted=self.hinted,
            response_tokens=pick(self.response_tokens),
            truncated=pick(self.truncated),
            decision=pick(self.decision),
        )

    @property
    def text_only_correct(self) -> bool:
        """Some text-only response is correct: NAAR's branch test and the step stats' "easy"."""
        return any(c and not u for c, u in zip(self.correct, self.used_tool, strict=True))

    @property
    def all_wrong(self) -> bool:
        """Every response is wrong: the group HGCE rescues with a hint."""
        return not any(self.correct)


logger = logging.getLogger(__name__)

DECISION_CROP_AREA = 4.0
"""`decided`: a crop of a box is at most this many times the box's area. The demo's expert crops
a `synth_keys` box exactly (1x); a crop that also holds a neighbouring box of that grid is over
4x (two stacked 40x48 boxes 149 px apart: 40 x 197, 4.1x)."""
CONFIDENCE_THRESHOLD = 0.85  # seed 001: confidence > 0.85 -> easy
MIN_HARD_SHARE = 0.2  # seed 001: below 20% hard items the tool skills are not reinforced
RECOMMENDED_HARD_SHARE = 0.3


def item_label(metadata: Mapping[str, Any]) -> Difficulty | None:
    """The label an item carries in `metadata["difficulty"]` (synth's, the data pipeline's), or
    None when it has none: what the run "labels easy" for rewards and health metrics."""
    label = metadata.get("difficulty")
    return label if label in ("easy", "hard") else None


def item_decision_box(metadata: Mapping[str, Any]) -> list[int] | None:
    """The box (x0, y0, x1, y1, pixels of the item's first image) whose crop is the item's
    decisive first move, from `metadata["decision_box"]` (`synth_keys`: the key), or None when
    the item names none: what `rl/decision_rate` is measured on."""
    box = metadata.get("decision_box")
    return [int(v) for v in box] if box is not None else None


def first_crop(trajectory: Trajectory) -> tuple[int, int, int, int] | None:
    """The box of the episode's first crop, as the sandbox recorded it (`ToolCall.image_crops`,
    in the input image's frame), or None when no call returned a crop it could place."""
    for call in trajectory.tool_calls:
        for crop in call.image_crops:
            if crop is not None and crop.frame == 0:
                return crop.box
    return None


def decided(trajectory: Trajectory, box: Sequence[int]) -> bool:
    """True when the episode's first crop is a crop of `box`: it holds the whole box and is at
    most `DECISION_CROP_AREA` times its area (a crop of the whole image, or of several boxes,
    holds it too but decides nothing about it)."""
    crop = first_crop(trajectory)
    if crop is None:
        return False
    x0, y0, x1, y1 = (int(v) for v in box)
    holds = crop[0] <= x0 and crop[1] <= y0 and x1 <= crop[2] and y1 <= crop[3]
    area = (crop[2] - crop[0]) * (crop[3] - crop[1])
    return holds and area <= DECISION_CROP_AREA * max((x1 - x0) * (y1 - y0), 1)


def label_from_passes(passes: int, attempts: int, easy_threshold: float = 0.5) -> Difficulty:
    """easy when the base model's notool pass rate passes / attempts reaches `easy_threshold`."""
    if attempts < 1 or not 0 <= passes <= attempts:
        raise ValueError(f"pass count {passes} of {attempts} attempts is not a valid pass@k")
    if not 0.0 < easy_threshold <= 1.0:
        raise ValueError(f"easy_threshold={easy_threshold} must be in (0, 1]")
    return "easy" if passes / attempts >= easy_threshold else "hard"


def answer_confidence(logits: Tensor) -> Tensor:
    """max_v softmax(logits)_v over the last axis: [..., V] -> [...] (seed 001)."""
    return logits.float().softmax(dim=-1).amax(dim=-1)


def label_from_confidence(confidence: float, threshold: float = CONFIDENCE_THRESHOLD) -> Difficulty:
    """easy when the small model's confidence is strictly above `threshold` (0.85, seed 001)."""
    if not 0.0 <= confidence <= 1.0:
        raise ValueError(f"confidence {confidence} is not a probability")
    return "easy" if confidence > threshold else "hard"


def tool_needed(
    p_notool: Sequence[float], p_tool: Sequence[float], threshold: float = 0.5
) -> list[bool]:
    """The blog's "HGCE" item filter (seed 001, `select_hgce_data`): solved with the tool only.

    Per item, notool pass rate < threshold and tool pass rate >= threshold (with one sample each:
    wrong without the tool, right with it). This is a data filter for the RL set, not the
    paper's HGCE (beacon.md §4); the blog's extra cut to the first k_ratio of items is left out.
    """
    if len(p_notool) != len(p_tool):
        raise ValueError(f"{len(p_notool)} notool but {len(p_tool)} tool pass rates")
    return [n < threshold <= t for n, t in zip(p_notool, p_tool, strict=True)]


def difficulty_warnings(
    labels: Sequence[Difficulty], beta: float = 0.5, gamma: float = 0.2
) -> list[str]:
    """The blog's pitfalls for an RL set with these labels and this β, γ; empty when none apply.

    1. hard share < 20% (seed 001, pitfall 1).
    2. γ >= β, or (1 - h)·γ > h·β with h the hard share: for a policy that cannot yet tell easy
       from hard, the expected tool penalty on easy items then outweighs the expected tool bonus
       on hard items, which pushes it to drop tools everywhere (pitfall 3, "tool phobia"). This
       threshold is ours; the blog only says to start at γ = 0.2 and watch P[tool | hard].
    """
    if not labels:
        return ["the RL set has no difficulty labels; label it before using rl.reward=blog"]
    hard = sum(label == "hard" for label in labels) / len(labels)
    out = []
    if hard < MIN_HARD_SHARE:
        out.append(
            f"only {hard:.0%} of the RL set is hard (< {MIN_HARD_SHARE:.0%}): tool use on hard "
            f"items gets too little signal; aim for >= {RECOMMENDED_HARD_SHARE:.0%} hard items"
        )
    if gamma >= beta or (1.0 - hard) * gamma > hard * beta:
        out.append(
            f"rl.blog.gamma={gamma} is large against beta={beta} at a hard share of {hard:.0%}: "
            "the tool penalty on easy items outweighs the tool bonus on hard ones, which can "
            "collapse P[tool | hard] ('tool phobia'); lower gamma (the blog starts at 0.2)"
        )
    return out


def warn_difficulty(
    labels: Sequence[Difficulty], beta: float = 0.5, gamma: float = 0.2
) -> list[str]:
    """Log each of `difficulty_warnings` as a warning and return them."""
    warnings = difficulty_warnings(labels, beta, gamma)
    for message in warnings:
        logger.warning(message)
    return warnings


@dataclass(frozen=True)
class FormatCheck:
    """Whether a trajectory earns R_format = 1, and the first rule it broke if not."""

    ok: bool
    problem: str | None = None


def format_check(trajectory: Trajectory) -> FormatCheck:
    """Check the paper's format rules on the segment structure (module docstring)."""
    if trajectory.error is not None:
        return FormatCheck(False, f"the episode failed: {trajectory.error}")
    if trajectory.finish_reason != "answer" or trajectory.final_answer is None:
        return FormatCheck(False, f"no closed <answer> (finish_reason={trajectory.finish_reason})")
    segments = trajectory.segments
    observations = [i for i, s in enumerate(segments) if s.role == "observation"]
    for i in observations:
        if i == 0 or segments[i - 1].role != "generated":
            return FormatCheck(False, f"observation segment {i} does not follow a code block")
    if segments[-1].role != "generated":
        return FormatCheck(False, "the trajectory ends on an observation, not on the answer")
    calls = trajectory.tool_calls
    if any(not c.executed for c in calls):
        return FormatCheck(False, "a code block could not be run (malformed, or notool mode)")
    opened = trajectory.generated_text.count(get_format(trajectory.format).call_open)
    if not opened == len(calls) == len(observations):
        return FormatCheck(
            False,
            f"{opened} code blocks opened, {len(calls)} calls run, {len(observations)} "
            "observations: every code block must be followed by its observation",
        )
    return FormatCheck(True)


def format_reward(trajectory: Trajectory) -> float:
    """R_format ∈ {0, 1} (paper §3): 1 when `format_check` passes."""
    return 1.0 if format_check(trajectory).ok else 0.0


def group_outcomes(
    trajectories: Sequence[Trajectory],
    correct: Sequence[bool],
    label: Difficulty | None = None,
    decision_box: Sequence[int] | None = None,
) -> GroupOutcomes:
    """One group's record from its G trajectories and the verifier's verdicts on them.

    Mode: a response is code-using when it wrote a tool call (`Trajectory.tool_calls`, executed
    or not). NAAR contrasts text-only with code-based responses; a malformed call is not text
    only, and counting it as text would let it flip its group into the "text suffices" branch.
    (Evaluation's `used_tool` counts executed calls only; with well-formed calls they agree.)
    Format is `format_check`; the group is hinted when its trajectories were sampled in mode
    "hinted" (they must agree). With the item's `decision_box` (`item_decision_box`), each
    response also records whether its first crop holds that box (`decided`).
    """
    modes = {t.mode == "hinted" for t in trajectories}
    if len(modes) > 1:
        raise ValueError("a group mixes hinted and un-hinted trajectories; keep HGCE groups apart")
    return GroupOutcomes.of(
        correct,
        [t.attempted_tool_calls > 0 for t in trajectories],
        [format_check(t).ok for t in trajectories],
        label=label,
        hinted=modes == {True},
        response_tokens=[t.response_tokens for t in trajectories],
        truncated=[t.truncated for t in trajectories],
        decision=[] if decision_box is None else [decided(t, decision_box) for t in trajectories],
    )
