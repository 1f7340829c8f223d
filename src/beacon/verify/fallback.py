"""The judge as a fallback for scorers outside `verify()` (benchmark-specific rules).

`verify()` asks its judge itself; benchmark scorers that apply their own rules (TIR-Bench's task
rules, BabyVision coordinates, GameQA option numbers) call `judge_unparsed` with their rule
verdict, so the judge is asked only when the rule could not read an answer, the same policy
as `verify()`. A judge verdict is binary: partial credit comes from the rules alone.
"""

from __future__ import annotations

from beacon.types import Sample
from beacon.verify import Judge, Verdict, extract_answer

_MAX_ANSWER_CHARS = 2000


def judge_unparsed(
    response: str, sample: Sample, verdict: Verdict, judge: Judge | None, reference: str
) -> Verdict:
    """`verdict` as it is, or the judge's verdict when the rule read no answer.

    `reference` is the gold as the judge should see it (an option number with its text, say).
    An undecided judge leaves the rule verdict in place.
    """
    if judge is None or verdict.parsed:
        return verdict
    answer = extract_answer(response) or response.strip()[-_MAX_ANSWER_CHARS:]
    if not answer:
        return verdict
    result = judge(sample.question, answer, reference)
    if result.correct is None:
        return verdict
    cached = " (cached)" if result.cached else ""
    detail = f"judge {judge.model_name}/{judge.prompt_version}{cached}: {result.raw.strip()}"
    return Verdict(result.correct, float(result.correct), True, answer, "judge", detail)
