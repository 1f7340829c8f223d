r"""What the critic is shown and what it must answer: the observed evidence states of one group
(Algorithm 3) with the ids the critic sees, and its output contract (the strict JSON schema and
the typed output it parses into).

**States.** State 0 is the original image(s): no owner, n_tool = n_code = 0. Then, for each
trajectory i in group order and each executed sandbox call of it, one state: its owner i, every
image available at that point (the original images, the images of i's earlier calls and this
call's images; images returned by one call belong to one state), and the cumulative tool rounds
n_tool and code tokens n_code the agent loop recorded in `Trajectory.evidence`.

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

**Output.** The schema is sent as an OpenAI `response_format` of type `json_schema` with
`strict: true`: every field required, no additional properties, `stage` an enum.
`parse_critic_output` checks the same rules again on our side (a server without structured
output, or a faulty one, may still send anything) and raises `CriticOutputError` naming the
first problem; what the ids refer to is checked later, against the group, by
`beacon.train.opd.assemble`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

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


Stage = Literal["CORRECT", "ACQUIRE", "READ", "GROUND", "OTHER"]
STAGES: tuple[str, ...] = ("CORRECT", "ACQUIRE", "READ", "GROUND", "OTHER")


def _obj(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


_STRING = {"type": "string"}
CRITIC_SCHEMA: dict[str, Any] = _obj(
    {
        "applicable": {"type": "boolean"},
        "sufficient_states": {
            "type": "array",
            "items": _obj(
                {"state_id": _STRING, "support_image_ids": {"type": "array", "items": _STRING}}
            ),
        },
        "reading": _obj({"query_slot": _STRING, "observed_value": _STRING, "visual_fact": _STRING}),
        "grounding": _obj({"rule": _STRING}),
        "rollout_diagnoses": {
            "type": "array",
            "items": _obj(
                {
                    "rollout_id": _STRING,
                    "stage": {"type": "string", "enum": list(STAGES)},
                    "discrepancy": _STRING,
                }
            ),
        },
    }
)
RESPONSE_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {"name": "revue_critic", "strict": True, "schema": CRITIC_SCHEMA},
}


class CriticOutputError(ValueError):
    """The critic's reply is not JSON or does not follow CRITIC_SCHEMA."""


@dataclass(frozen=True)
class SufficientState:
    """A state e the critic found sufficient to answer, with U_e, the smallest subset of its images
    that supports it."""

    state_id: str
    support_image_ids: tuple[str, ...]  # U_e, the smallest supporting subset


@dataclass(frozen=True)
class Reading:
    """What a sufficient state shows: the query slot, the value observed in it and the visual fact
    f_x behind that value."""

    query_slot: str
    observed_value: str
    visual_fact: str  # f_x


@dataclass(frozen=True)
class Grounding:
    """The rule gamma_x that turns the visual fact into the answer."""

    rule: str  # gamma_x


@dataclass(frozen=True)
class Diagnosis:
    """B_i = (sigma_i, delta_i) for one rollout."""

    rollout_id: str
    stage: Stage
    discrepancy: str


@dataclass(frozen=True)
class CriticOutput:
    """J_x: one group's critic output, schema-checked (ids not yet resolved)."""

    applicable: bool
    sufficient_states: tuple[SufficientState, ...]
    reading: Reading
    grounding: Grounding
    rollout_diagnoses: tuple[Diagnosis, ...]


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)


def _fields(value: Any, schema: dict[str, Any], path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CriticOutputError(f"{path}: expected an object, got {type(value).__name__}")
    missing = [k for k in schema["required"] if k not in value]
    extra = [k for k in value if k not in schema["properties"]]
    if missing or extra:
        raise CriticOutputError(f"{path}: missing fields {missing}, unknown fields {extra}")
    for key, sub in schema["properties"].items():
        _check_type(value[key], sub, f"{path}.{key}")
    return value


def _check_type(value: Any, schema: dict[str, Any], path: str) -> None:
    kind = schema["type"]
    if kind == "object":
        _fields(value, schema, path)
    elif kind == "array":
        if not isinstance(value, list):
            raise CriticOutputError(f"{path}: expected an array, got {type(value).__name__}")
        for i, item in enumerate(value):
            _check_type(item, schema["items"], f"{path}[{i}]")
    elif kind == "boolean" and not isinstance(value, bool):
        raise CriticOutputError(f"{path}: expected a boolean, got {value!r}")
    elif kind == "string":
        if not isinstance(value, str):
            raise CriticOutputError(f"{path}: expected a string, got {value!r}")
        if "enum" in schema and value not in schema["enum"]:
            raise CriticOutputError(f"{path}: {value!r} is not one of {schema['enum']}")


def parse_critic_output(text: str) -> CriticOutput:
    """Parse and schema-check one critic reply (a ```json fence around it is tolerated)."""
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    try:
        data = json.loads(fenced.group(1) if fenced else stripped)
    except json.JSONDecodeError as exc:
        raise CriticOutputError(f"reply is not JSON: {exc}") from exc
    _fields(data, CRITIC_SCHEMA, "$")
    return CriticOutput(
        applicable=data["applicable"],
        sufficient_states=tuple(
            SufficientState(s["state_id"], tuple(s["support_image_ids"]))
            for s in data["sufficient_states"]
        ),
        reading=Reading(**data["reading"]),
        grounding=Grounding(**data["grounding"]),
        rollout_diagnoses=tuple(Diagnosis(**d) for d in data["rollout_diagnoses"]),
    )
