"""The critic over real HTTP: the scripted synth critic, and every fault falling back, counted.

A local OpenAI-compatible test server (FastAPI + uvicorn, like `beacon serve`) answers each
request in one fault mode; `ask_critic` with `HttpCritic` as its `send`, then
`check_and_assemble`, must end in the paper's fallback (no reflection for the group, the base
teacher used) without raising.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from PIL import Image

from beacon.engines.scripted_server import chat_app
from beacon.engines.serve import run_app_in_thread
from beacon.jsonl import read_jsonl
from beacon.train.opd.assemble import check_and_assemble, coverage_counts, slot_statuses
from beacon.train.opd.critic import ExchangeLog, HttpCritic, ask_critic, build_critic_request
from beacon.train.opd.critic_schema import ObservedStates, observed_states
from beacon.train.opd.scripted_critic import ScriptedCritic, create_app
from beacon.types import Sample

from .helpers import labels, make_trajectory

SAMPLE = Sample(id="s1", images=[], question="Which?", answer="A", answer_type="text")
GOOD = {
    "applicable": True,
    "sufficient_states": [{"state_id": "R1_S1", "support_image_ids": ["R1_S1_IMG1"]}],
    "reading": {"query_slot": "s", "observed_value": "A", "visual_fact": "f"},
    "grounding": {"rule": "r"},
    "rollout_diagnoses": [
        {"rollout_id": "R1", "stage": "CORRECT", "discrepancy": ""},
        {"rollout_id": "R2", "stage": "ACQUIRE", "discrepancy": "cropped elsewhere"},
    ],
}


def _with(**changes: object) -> str:
    return json.dumps({**GOOD, **changes})


FAULTS = {
    "malformed": "{not json",
    "unknown_state": _with(
        sufficient_states=[{"state_id": "R9_S4", "support_image_ids": ["R9_S4_IMG1"]}]
    ),
    "unknown_image": _with(
        sufficient_states=[{"state_id": "R1_S1", "support_image_ids": ["R7_S1_IMG3"]}]
    ),
    "wrong_count": _with(rollout_diagnoses=GOOD["rollout_diagnoses"][:1]),
    "contradictory": _with(  # all-correct group, but R2 diagnosed as wrong
        rollout_diagnoses=[
            {"rollout_id": "R1", "stage": "CORRECT", "discrepancy": ""},
            {"rollout_id": "R2", "stage": "READ", "discrepancy": "misread"},
        ]
    ),
}


def fault_app(mode: str) -> FastAPI:
    """A critic endpoint that answers every request in one fault `mode`."""

    async def reply(body: dict) -> str | Response:
        assert body["response_format"]["json_schema"]["strict"] is True
        assert body["temperature"] == 0.0 and body["max_tokens"] == 2048
        if mode == "slow":
            await asyncio.sleep(5)
        if mode == "error500":
            return JSONResponse({"error": {"message": "overloaded"}}, 500)
        if mode == "not_json_body":
            return PlainTextResponse("<html>gateway</html>")
        if mode == "good":
            return json.dumps(GOOD)
        return FAULTS[mode]

    return chat_app(reply, "critic")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """One server, each fault mode mounted under its own prefix (`/{mode}/v1/...`)."""
    root = FastAPI()
    for mode in ("slow", "error500", "not_json_body", "good", *FAULTS):
        root.mount(f"/{mode}", fault_app(mode))
    handle = run_app_in_thread(root)
    yield handle.base_url.removesuffix("/v1")
    handle.stop()


def group(labels_correct: bool = False) -> tuple[list, list[bool], ObservedStates]:
    trajectories = [make_trajectory([["k1"]]), make_trajectory([["k2"]], answer="B")]
    if labels_correct:
        trajectories[1] = make_trajectory([["k2"]])
    return trajectories, labels(trajectories, SAMPLE), observed_states(trajectories)


def ask(url: str, labels_correct: bool = False, timeout_s: float = 2.0, log=None):
    trajectories, labels, states = group(labels_correct)
    request = build_critic_request(
        SAMPLE.question,
        SAMPLE.answer,
        trajectories,
        labels,
        states,
        lambda k: Image.new("RGB", (4, 4)),
    )
    send = HttpCritic(url, "critic")

    async def run():
        try:
            return await ask_critic(request, send, 1, timeout_s, log)
        finally:
            await send.aclose()

    reply = asyncio.run(run())
    assembly = check_and_assemble(reply.output, states, labels, request.shown_image_ids)
    return reply, assembly


def test_good_reply_assembles(server, tmp_path) -> None:
    log = ExchangeLog(tmp_path / "critic.jsonl")
    reply, assembly = ask(f"{server}/good/v1", log=log.writer(step=1, group=0))
    assert reply.attempts == 1 and assembly.status == "complete"
    record = json.loads((tmp_path / "critic.jsonl").read_text().splitlines()[0])
    assert record["step"] == 1 and json.loads(record["response"]) == GOOD
    assert "<image ORIGINAL_IMAGE>" in record["request"]["messages"][1]["content"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("mode", "status", "error"),
    [
        ("down", "missing", "connection error"),
        ("slow", "missing", "timed out"),
        ("error500", "missing", "HTTP 500"),
        ("not_json_body", "missing", "malformed reply"),
        ("malformed", "missing", "rejected"),
    ],
)
def test_transport_and_parse_faults_fall_back(server, mode, status, error) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1" if mode == "down" else f"{server}/{mode}/v1"
    reply, assembly = ask(url, timeout_s=0.5)
    assert reply.output is None and reply.attempts == 2  # one retry, then the fallback
    assert error in reply.error
    assert assembly.status == status and assembly.reflections == [None, None]
    assert coverage_counts(slot_statuses(assembly))[status] == 2


@pytest.mark.parametrize(
    ("mode", "problem"),
    [
        ("unknown_state", "unknown state id"),
        ("unknown_image", "not available"),
        ("wrong_count", "expected exactly one"),
        ("contradictory", "contradicts"),
    ],
)
def test_invalid_outputs_fall_back(server, mode, problem) -> None:
    reply, assembly = ask(f"{server}/{mode}/v1", labels_correct=mode == "contradictory")
    assert reply.output is not None  # it parsed; Algorithm 4 rejects it
    assert assembly.status == "invalid" and any(problem in p for p in assembly.problems)
    assert coverage_counts(slot_statuses(assembly))["invalid"] == 2


def test_scripted_critic_over_http() -> None:
    from beacon.benchmarks.synth import generate

    sample = generate(0, 0)
    handle = run_app_in_thread(create_app(ScriptedCritic([sample])))
    try:
        trajectories = [make_trajectory([["k1"]], answer=sample.answer), make_trajectory([])]
        correct = labels(trajectories, sample)
        assert correct == [True, False]
        states = observed_states(trajectories)
        request = build_critic_request(
            sample.question,
            sample.answer,
            trajectories,
            correct,
            states,
            lambda k: Image.new("RGB", (4, 4)),
        )
        send = HttpCritic(handle.base_url, "scripted-critic")
        assert send.request_body(request)["messages"][1]["content"][2]["type"] == "image_url"

        async def run():
            try:
                return await ask_critic(request, send)
            finally:
                await send.aclose()

        reply = asyncio.run(run())
    finally:
        handle.stop()
    assembly = check_and_assemble(reply.output, states, correct, request.shown_image_ids)
    assert assembly.status == "complete"
    assert [r.break_point.stage for r in assembly.reflections] == ["CORRECT", "READ"]
    assert all(r.anchor.state.state_id == "ORIGINAL_STATE" for r in assembly.reflections)
    assert reply.output.reading.observed_value == sample.answer


def test_exchange_log_cuts_a_torn_line_and_writes_durably(tmp_path, monkeypatch) -> None:
    """A run killed mid-line left half a record: the resumed run's log cuts it before appending
    (else the torn line would sit mid-file, which `read_jsonl` calls corruption), and each record
    is fsynced before the writer returns."""
    path = tmp_path / "critic.jsonl"
    path.write_text('{"step": 1, "attempt": 1}\n{"step": 2, "att')
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    log = ExchangeLog(path)
    log.writer(step=2, group=0)({"attempt": 1, "response": None})
    log.close()
    assert [r["step"] for r in read_jsonl(path)] == [1, 2]
    assert path.read_text().endswith("\n") and len(synced) == 1
