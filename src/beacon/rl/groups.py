"""The per-group record every RL component reads: one prompt's G responses, as booleans.

Rewards, group filtering, HGCE's trigger and the step statistics all work on whole groups (NAAR's
reward of one response depends on the other responses of its group), so they share this one
typed record instead of passing parallel lists around.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

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
    """

    correct: tuple[bool, ...]
    used_tool: tuple[bool, ...]
    format_ok: tuple[bool, ...]
    label: Difficulty | None = None
    hinted: bool = False
    response_tokens: tuple[int, ...] = field(default=())
    truncated: tuple[bool, ...] = field(default=())

    def __post_init__(self) -> None:
        sizes = {len(self.correct), len(self.used_tool), len(self.format_ok)}
        if self.response_tokens:
            sizes.add(len(self.response_tokens))
        if self.truncated:
            sizes.add(len(self.truncated))
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
        if "truncated" in kwargs:
            kwargs["truncated"] = tuple(bool(t) for t in kwargs["truncated"])
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
        )

    @property
    def text_only_correct(self) -> bool:
        """Some text-only response is correct: NAAR's branch test and the step stats' "easy"."""
        return any(c and not u for c, u in zip(self.correct, self.used_tool, strict=True))

    @property
    def all_wrong(self) -> bool:
        """Every response is wrong: the group HGCE rescues with a hint."""
        return not any(self.correct)
