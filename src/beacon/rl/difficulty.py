"""The blog variant's difficulty labels h ∈ {easy, hard} and its pitfall warnings (seed 001).

Labels come from an oracle and are used only for the reward, never shown to the model:

- from pass counts: notool correctness of the base model over k samples (the data pipeline's
  pass@k); easy when passes / attempts >= `easy_threshold` (default 0.5, the same rule as
  `beacon.metrics.adaptivity`);
- from confidence: a small model's max softmax probability of its answer; easy when it is
  > 0.85 (seed 001, "难度标注的轻量替代").

Pitfalls the blog lists ("常见坑") become warnings: a hard share below 20% leaves HGCE and the
β bonus nothing to act on (the blog recommends >= 30%), and a large γ makes the policy avoid
tools altogether ("tool phobia", P[tool | hard] collapses).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor

from beacon.rl.groups import Difficulty

logger = logging.getLogger(__name__)

CONFIDENCE_THRESHOLD = 0.85  # seed 001: confidence > 0.85 -> easy
MIN_HARD_SHARE = 0.2  # seed 001: below 20% hard items the tool skills are not reinforced
RECOMMENDED_HARD_SHARE = 0.3


def item_label(metadata: Mapping[str, Any]) -> Difficulty | None:
    """The label an item carries in `metadata["difficulty"]` (synth's, the data pipeline's), or
    None when it has none: what the run "labels easy" for rewards and health metrics."""
    label = metadata.get("difficulty")
    return label if label in ("easy", "hard") else None


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
