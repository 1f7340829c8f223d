"""The critic's output contract: the strict JSON schema and the typed output it parses into.

The schema is sent as an OpenAI `response_format` of type `json_schema` with `strict: true`:
every field required, no additional properties, `stage` an enum. `parse_critic_output` checks the
same rules again on our side (a server without structured output, or a faulty one, may still send
anything) and raises `CriticOutputError` naming the first problem; what the ids refer to is
checked later, against the group, by `beacon.train.opd.assemble`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

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
