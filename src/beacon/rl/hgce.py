"""Hint-Guided Capability Expansion: which groups get a hint, and which hinted groups train.

Paper §3 "Hint-Guided Capability Expansion" (beacon.md §4):

1. a group whose responses are **all wrong** gets a hint (`needs_hint`);
2. the hint is the item's cached answer-free hint (data pipeline), checked by `hint_leaks`;
3. a new group is sampled with the hint appended to the question (agent mode "hinted");
4. the hinted group trains with the hint removed from the input (`beacon.rl.sequences`), if it
   passes the same group filter as any other group; such a group is "rescued".

The trainer owns steps 2-3 (expert calls, sampling); this module holds the rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from beacon.rl.config import FilterRule
from beacon.rl.filtering import drop_reason
from beacon.rl.groups import GroupOutcomes
from beacon.rl.hints import leak_reasons


def needs_hint(group: GroupOutcomes) -> bool:
    """HGCE's trigger: every response of the (un-hinted) group is wrong (paper §3)."""
    return not group.hinted and group.all_wrong


@dataclass(frozen=True)
class HintCheck:
    """Whether a hint may be shown to the policy, and why not (for the step log)."""

    ok: bool
    problems: list[str] = field(default_factory=list)


def check_hint(
    hint: str | None, answer: str, options: Mapping[str, str] | None = None
) -> HintCheck:
    """A hint is usable when it is non-empty and answer-free (`hint_leaks`, beacon.md §4 step 2)."""
    if hint is None or not hint.strip():
        return HintCheck(False, ["no hint cached for this item"])
    problems = leak_reasons(hint, answer, options)
    return HintCheck(not problems, problems)


def rescued(group: GroupOutcomes, rewards: Sequence[float], rule: FilterRule = "adaptive") -> bool:
    """A hinted group is rescued when the group filter keeps it (it carries a learning signal)."""
    return group.hinted and drop_reason(group, rewards, rule) is None
