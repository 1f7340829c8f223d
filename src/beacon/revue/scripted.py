"""A scripted critic for `synth`: the critic contract answered from ground truth, over real HTTP.

Not a model. It reads the critic request our trainer sends (`build_critic_request`'s text: task,
rollouts with their labels, evidence states) and answers the same strict JSON a critic model
would, from what `synth` knows by construction: the reference answer and each item's `facts`.
It exists so an OPD run on CPU exercises the whole path (HTTP, schema, Algorithm 4, teacher
conditioning) with a critic whose output is right and reproducible.

Rules:
- Sufficient states: the original state, support ORIGINAL_IMAGE (a synth item's region always
  lies in its original image). Tool states are not listed: deciding whether a crop contains the
  region needs its box, which the request does not carry (see "What is not covered").
- Reading: the question as query slot, the reference answer as observed value, the item's facts
  (when the question matches a known synth item) as the visual fact.
- First broken link per rollout: CORRECT for a correct rollout; OTHER (empty discrepancy is not
  allowed for wrong answers) when it gave no answer; otherwise READ, since the sufficient
  original image was in its context.

What is not covered: tool states are never sufficient, so anchors are always the original state
and ACQUIRE is never diagnosed.

`create_app` serves it at `/v1/chat/completions` (FastAPI, like `beacon serve`); run it with
`beacon.engines.serve.run_app_in_thread`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI, Request

from beacon.types import Sample

_TASK = re.compile(r"Question: (.*?)\nReference answer: (.*?)(?:\n|$)", re.S)
_ROLLOUT = re.compile(
    r"=== Rollout (R\d+) \((CORRECT|INCORRECT)\) ===\n(.*?)(?=\n=== Rollout |$)", re.S
)
_FINAL = re.compile(r"Final answer: (.*)")


def request_text(messages: list[dict[str, Any]]) -> str:
    """All text parts of the user messages, joined by newlines."""
    parts = []
    for message in messages:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
            continue
        parts.extend(p.get("text", "") for p in content or [] if p.get("type") == "text")
    return "\n".join(parts)


class ScriptedCritic:
    """Answers critic requests for items of `samples` (looked up by question text)."""

    def __init__(self, samples: Iterable[Sample] = ()) -> None:
        self.facts = {s.question.strip(): s.metadata.get("facts") for s in samples}

    def answer(self, text: str) -> dict[str, Any]:
        """The critic output (CRITIC_SCHEMA) for one request's text."""
        task = _TASK.search(text)
        question, reference = (task.group(1).strip(), task.group(2).strip()) if task else ("", "")
        facts = self.facts.get(question)
        fact = f"the image shows {json.dumps(facts)}" if facts else f"the image shows {reference}"
        return {
            "applicable": True,
            "sufficient_states": [
                {"state_id": "ORIGINAL_STATE", "support_image_ids": ["ORIGINAL_IMAGE"]}
            ],
            "reading": {"query_slot": question, "observed_value": reference, "visual_fact": fact},
            "grounding": {"rule": "the answer is the observed value"},
            "rollout_diagnoses": [
                _diagnosis(rid, label, body, reference)
                for rid, label, body in _ROLLOUT.findall(text)
            ],
        }


def _diagnosis(rollout: str, label: str, body: str, reference: str) -> dict[str, str]:
    if label == "CORRECT":
        return {"rollout_id": rollout, "stage": "CORRECT", "discrepancy": ""}
    final = _FINAL.findall(body)
    answer = final[-1].strip() if final else "(none)"
    if answer == "(none)":
        return {"rollout_id": rollout, "stage": "OTHER", "discrepancy": "no final answer given"}
    return {
        "rollout_id": rollout,
        "stage": "READ",
        "discrepancy": f"answered {answer!r} although the original image shows {reference!r}",
    }


def chat_completion(content: str, model: str = "scripted-critic") -> dict[str, Any]:
    """An OpenAI chat-completions response body holding `content`."""
    return {
        "id": "scripted-critic",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }


def create_app(critic: ScriptedCritic) -> Any:
    """A FastAPI app answering `/v1/chat/completions` with the scripted critic's JSON."""
    app = FastAPI(title="beacon scripted critic")

    @app.post("/v1/chat/completions")
    async def complete(request: Request) -> dict[str, Any]:
        body = await request.json()
        output = critic.answer(request_text(body.get("messages", [])))
        return chat_completion(json.dumps(output))

    return app
