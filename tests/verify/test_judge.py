"""The LLM judge: prompt at temperature 0, reply parsing, and the on-disk cache's keying."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from beacon.engines.base import Engine, GenerationRequest, GenerationResult
from beacon.types import Sample
from beacon.verify import Judge, verify
from beacon.verify.judge import judge_key, parse_judge_reply


class ScriptedEngine:
    """An Engine that answers every request with a fixed reply and records what it was asked."""

    name = "scripted"
    tokenizer = None

    def __init__(self, reply: str = "CORRECT", error: str | None = None) -> None:
        self.reply = reply
        self.error = error
        self.requests: list[GenerationRequest] = []

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        self.requests.extend(requests)
        if self.error is not None:
            return [GenerationResult(text="", finish_reason="error", error=self.error)]
        return [GenerationResult(text=self.reply) for _ in requests]

    def close(self) -> None:
        pass


def test_scripted_engine_satisfies_the_protocol() -> None:
    assert isinstance(ScriptedEngine(), Engine)


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [("CORRECT", True), ("incorrect.", False), ("Correct", True), ("maybe", None), ("", None)],
)
def test_parse_judge_reply(reply: str, verdict: bool | None) -> None:
    assert parse_judge_reply(reply) is verdict


def test_judge_asks_at_temperature_zero_and_caches(tmp_path: Path) -> None:
    engine = ScriptedEngine("CORRECT")
    judge = Judge(engine, "judge-model", tmp_path)
    first = judge("Which month?", "April", "Apr")
    second = judge("Which month?", "April", "Apr")
    assert first.correct is True and not first.cached
    assert second.correct is True and second.cached
    assert len(engine.requests) == 1
    request = engine.requests[0]
    assert request.sampling.temperature == 0.0
    assert "Apr" in request.messages[0]["content"] and "April" in request.messages[0]["content"]
    judge.close()


def test_cache_survives_a_new_judge_object(tmp_path: Path) -> None:
    Judge(ScriptedEngine("INCORRECT"), "m", tmp_path)("q", "a", "b")
    engine = ScriptedEngine("CORRECT")
    result = Judge(engine, "m", tmp_path)("q", "a", "b")
    assert result.correct is False and result.cached and not engine.requests


@pytest.mark.parametrize(
    "changed",
    [
        {"model": "other-model"},
        {"question": "q2"},
        {"answer": "a2"},
        {"reference": "r2"},
    ],
)
def test_any_key_field_change_misses_the_cache(tmp_path: Path, changed: dict[str, str]) -> None:
    base = {"model": "m", "question": "q", "answer": "a", "reference": "r"}
    Judge(ScriptedEngine("CORRECT"), base["model"], tmp_path)(
        base["question"], base["answer"], base["reference"]
    )
    fields = {**base, **changed}
    engine = ScriptedEngine("INCORRECT")
    result = Judge(engine, fields["model"], tmp_path)(
        fields["question"], fields["answer"], fields["reference"]
    )
    assert result.correct is False and not result.cached and len(engine.requests) == 1


def test_prompt_version_is_part_of_the_key() -> None:
    assert judge_key("m", "v1", "q", "a", "r") != judge_key("m", "v2", "q", "a", "r")
    # Field boundaries matter: ("ab", "c") and ("a", "bc") are different keys.
    assert judge_key("m", "v1", "ab", "c", "r") != judge_key("m", "v1", "a", "bc", "r")


def test_unknown_prompt_version_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="prompt_version"):
        Judge(ScriptedEngine(), "m", tmp_path, prompt_version="v9")


def test_undecided_replies_and_errors_are_not_cached(tmp_path: Path) -> None:
    judge = Judge(ScriptedEngine("I am not sure"), "m", tmp_path)
    assert judge("q", "a", "r").correct is None
    failing = Judge(ScriptedEngine(error="HTTP 503"), "m", tmp_path)
    assert failing("q", "a", "r").correct is None
    engine = ScriptedEngine("CORRECT")
    assert Judge(engine, "m", tmp_path)("q", "a", "r").correct is True
    assert len(engine.requests) == 1


def _text_sample() -> Sample:
    return Sample(id="t1", images=[], question="Which month?", answer="Apr", answer_type="text")


def test_verify_uses_the_judge_only_when_rules_cannot_decide(tmp_path: Path) -> None:
    engine = ScriptedEngine("CORRECT")
    judge = Judge(engine, "m", tmp_path)
    exact = verify("<answer>Apr</answer>", _text_sample(), judge=judge)
    assert exact.correct and exact.source == "rule" and not engine.requests
    rescued = verify("<answer>April</answer>", _text_sample(), judge=judge)
    assert rescued.correct and rescued.source == "judge" and rescued.prediction == "April"
    assert rescued.detail is not None and "judge m/v1" in rescued.detail
    number = Sample(id="n1", images=[], question="How many?", answer="3", answer_type="number")
    assert verify("<answer>4</answer>", number, judge=judge).source == "rule"
    assert len(engine.requests) == 1


def test_judge_reads_unparsed_choice_answers(tmp_path: Path) -> None:
    engine = ScriptedEngine("INCORRECT")
    sample = Sample(
        id="c1",
        images=[],
        question="Color?",
        answer="B",
        answer_type="choice",
        options={"A": "red", "B": "blue"},
    )
    verdict = verify(
        "<answer>navy-ish, I guess</answer>", sample, judge=Judge(engine, "m", tmp_path)
    )
    assert verdict.source == "judge" and verdict.parsed and not verdict.correct
    assert "B. blue" in engine.requests[0].messages[0]["content"]


def test_cache_is_shared_safely_between_threads(tmp_path: Path) -> None:
    engine = ScriptedEngine("CORRECT")
    judge = Judge(engine, "m", tmp_path)
    questions = [f"q{i % 5}" for i in range(40)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda q: judge(q, "a", "r"), questions))
    assert all(r.correct is True for r in results)
    assert len(judge.cache) == 5
    # Concurrent first asks of one key may each reach the engine; the cache keeps one row.
    assert 5 <= len(engine.requests) <= len(questions)
