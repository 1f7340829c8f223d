"""Observed evidence states of one group (Algorithm 3) and the ids the critic sees.

State 0 is the original image(s): no owner, n_tool = n_code = 0. Then, for each trajectory i in
group order and each executed sandbox call of it, one state: its owner i, every image available at
that point (the original images, the images of i's earlier calls and this call's images; images
returned by one call belong to one state), and the cumulative tool rounds n_tool and code tokens
n_code the agent loop recorded in `Trajectory.evidence`.

Critic-facing ids are stable and readable: `ORIGINAL_STATE` / `ORIGINAL_IMAGE` (then
`ORIGINAL_IMAGE_2`, ... for multi-image samples), `R3` for trajectory index 2, `R3_S1` for its
first call's state and `R3_S1_IMG2` for that call's second image. `index` orders states for the
last component of the anchor cost (Eq. 13).

Verdicts: the kind of a group by its correctness labels (Algorithm 2's output): all-correct,
mixed or all-wrong, which picks the critic's prompt variant and how Algorithm 4 assembles.

The labels c_i themselves are the benchmark's verdicts (`beacon.rollout.score`, through
`beacon.rollout.Rollouts`), the verdict `beacon eval` and GRPO use. Deviation, stated:
Algorithm 2 reads only the `<answer>` span (missing or empty is wrong); the benchmark's scorer
reads that span first and, where a response has none, its fallbacks (`\boxed{}`, an "answer
is" phrase, the last line), so a distillation result and an RL result are scored alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from beacon.types import Trajectory

ORIGINAL_STATE_ID = "ORIGINAL_STATE"


@dataclass(frozen=True)
class ObservedState:
    """One evidence state e: provenance, available images and cumulative cost counts."""

    index: int
    state_id: str
    owner: int | None
    image_ids: tuple[str, ...]
    new_image_ids: tuple[str, ...]
    n_tool: int
    n_code: int
    segment_index: int | None = None

    @property
    def is_original(self) -> bool:
        """True for the original image's state, which belongs to no rollout."""
        return self.owner is None


@dataclass
class ObservedStates:
    """All states of a group and the map from critic image ids to ImageStore keys."""

    states: list[ObservedState]
    image_keys: dict[str, str] = field(default_factory=dict)

    def get(self, state_id: str) -> ObservedState | None:
        """The state with `state_id`, or None when the critic named one that does not exist."""
        return next((s for s in self.states if s.state_id == state_id), None)

    def owned_by(self, owner: int) -> list[ObservedState]:
        """The states rollout `owner` made with its tool calls, in call order."""
        return [s for s in self.states if s.owner == owner]

    @property
    def original(self) -> ObservedState:
        """The original image's state (always first)."""
        return self.states[0]


def rollout_id(index: int) -> str:
    """The critic's id of trajectory `index` (0-based): R1, R2, ..."""
    return f"R{index + 1}"


def _original_ids(count: int) -> list[str]:
    return ["ORIGINAL_IMAGE" if j == 0 else f"ORIGINAL_IMAGE_{j + 1}" for j in range(count)]


def observed_states(trajectories: Sequence[Trajectory]) -> ObservedStates:
    """ObservedStates (Algorithm 3) for the trajectories of one query, in group order."""
    prompt_images = trajectories[0].segments[0].images if trajectories[0].segments else []
    original = _original_ids(len(prompt_images))
    keys = dict(zip(original, prompt_images, strict=True))
    states = [ObservedState(0, ORIGINAL_STATE_ID, None, tuple(original), tuple(original), 0, 0)]
    for i, trajectory in enumerate(trajectories):
        available = list(original)
        for k, evidence in enumerate(trajectory.evidence):
            state_id = f"{rollout_id(i)}_S{k + 1}"
            segment = trajectory.segments[evidence.segment_index]
            new = [f"{state_id}_IMG{j + 1}" for j in range(len(segment.images))]
            keys.update(zip(new, segment.images, strict=True))
            available.extend(new)
            states.append(
                ObservedState(
                    index=len(states),
                    state_id=state_id,
                    owner=i,
                    image_ids=tuple(available),
                    new_image_ids=tuple(new),
                    n_tool=evidence.tool_calls,
                    n_code=evidence.code_tokens,
                    segment_index=evidence.segment_index,
                )
            )
    return ObservedStates(states, keys)


GroupKind = Literal["all_correct", "mixed", "all_wrong"]


def group_kind(labels: Sequence[bool]) -> GroupKind:
    """all_correct / mixed / all_wrong from per-trajectory correctness."""
    if not labels:
        raise ValueError("a group needs at least one trajectory to classify (rollout.group_size).")
    if all(labels):
        return "all_correct"
    return "all_wrong" if not any(labels) else "mixed"
