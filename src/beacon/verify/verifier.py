"""`verify(response, sample)`: the one entry point that scores a response against a sample.

It dispatches on `sample.answer_type` to one scorer of `SCORERS` (a registry: one function per
type), then, when a `Judge` is given and the rules could not decide, asks the judge:

- "choice":  `extract_choice` over `sample.options`; the gold may be a letter or an option text
             (MathVista stores texts, MMStar/MathVerse letters). A gold that is neither
             ("Unanswerable") is compared as text.
- "number":  `check_number` with the sample's precision / tolerance / year rule.
- "yesno":   yes/no labels; the gold may be "yes"/"no", "true"/"false" or "1"/"0"
             (HallusionBench).
- "text":    auto-detects numeric golds (→ number rule) and yes/no golds (→ yes/no rule);
             otherwise normalized exact match, with ANLS as `score` when the sample asks.
- "math":    `check_math` (math-verify, numbers rounded to the gold's decimals); a gold it
             cannot read (a bare letter) falls back to the choice/text rule.
- "list":    item-by-item comparison.

Per-sample hints, read from `sample.metadata` (all optional):

    precision   int    round the prediction to this many decimals (MathVista)
    relaxed_tol float  relative tolerance against the gold (ChartQA: 0.05)
    abs_tol     float  absolute tolerance
    year        bool   force (true) / disable (false) the exact-year rule; default: detect
    anls        bool or float   report ANLS as `score` (a float sets the threshold; 0.5)
    answers     list[str]       further accepted answers for text items
    list_order  bool   whether list items must be in order (default true)

The judge is used only when the rule verdict is unparsed, or for a "text" item that failed
exact match and is not ANLS-scored; its verdict carries `source="judge"`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from string import ascii_uppercase
from typing import Any, Literal

from beacon.types import Sample
from beacon.verify.choice import extract_choice
from beacon.verify.extract import extract_answer
from beacon.verify.judge import Judge
from beacon.verify.lists import lists_match, looks_like_list, split_list
from beacon.verify.numbers import check_number, is_plain_number, parse_number
from beacon.verify.symbolic import check_math
from beacon.verify.text import anls, exact_match, normalize_text, yesno_label

DEFAULT_ANLS_THRESHOLD = 0.5


@dataclass
class Verdict:
    """How one response scored.

    `correct` is the boolean the accuracy metrics count; `score` is in [0, 1] (1/0 for rule
    checks, ANLS where the benchmark uses it); `parsed` is False when no answer could be read
    (the item is then wrong and counted as unparsed); `prediction` is the extracted answer
    (an option key for choice items); `source` says whether rules or the judge decided.
    """

    correct: bool
    score: float
    parsed: bool
    prediction: str | None
    source: Literal["rule", "judge"] = "rule"
    detail: str | None = None


@dataclass
class ScoringHints:
    """Per-sample scoring options (see the module docstring for their metadata keys)."""

    precision: int | None = None
    relaxed_tol: float | None = None
    abs_tol: float | None = None
    year: bool | None = None
    anls: float | None = None  # the ANLS threshold, or None for no ANLS
    answers: list[str] = field(default_factory=list)
    list_order: bool = True


def hints_from_metadata(sample: Sample, tolerance: float | None = None) -> ScoringHints:
    """Read and type-check the hints; `tolerance` is the default `relaxed_tol`."""
    anls_flag = sample.metadata.get("anls")
    if isinstance(anls_flag, bool):
        anls_threshold = DEFAULT_ANLS_THRESHOLD if anls_flag else None
    else:
        anls_threshold = _typed(sample, "anls", float)
    precision = _typed(sample, "precision", int)
    relaxed_tol = _typed(sample, "relaxed_tol", float)
    if relaxed_tol is None and precision is None:
        relaxed_tol = tolerance
    answers = sample.metadata.get("answers") or []
    list_order = _typed(sample, "list_order", bool)
    return ScoringHints(
        precision=precision,
        relaxed_tol=relaxed_tol,
        abs_tol=_typed(sample, "abs_tol", float),
        year=_typed(sample, "year", bool),
        anls=anls_threshold,
        answers=[answers] if isinstance(answers, str) else [str(a) for a in answers],
        list_order=True if list_order is None else list_order,
    )


def _typed(sample: Sample, key: str, kind: type) -> Any:
    """`metadata[key]` as `kind` (int 2 is a valid float, 2.0 a valid int), None if absent."""
    value = sample.metadata.get(key)
    if value is None:
        return None
    if isinstance(value, bool) == (kind is bool):
        if kind is int and isinstance(value, float) and value.is_integer():
            return int(value)
        if kind is float and isinstance(value, int):
            return float(value)
        if isinstance(value, kind):
            return value
    raise ValueError(
        f"sample {sample.id!r}: metadata[{key!r}]={value!r} must be {kind.__name__}; "
        f"fix the benchmark loader that sets it."
    )


def _result(correct: bool, prediction: str | None, detail: str | None = None) -> Verdict:
    return Verdict(correct, float(correct), prediction is not None, prediction, "rule", detail)


def _unparsed(detail: str) -> Verdict:
    return Verdict(False, 0.0, False, None, "rule", detail)


def _number_rule(hints: ScoringHints) -> Callable[[str, str], bool]:
    def equal(pred: str, gold: str) -> bool:
        return check_number(
            pred,
            gold,
            rel_tol=hints.relaxed_tol,
            abs_tol=hints.abs_tol,
            precision=hints.precision,
            year=hints.year,
        )

    return equal


def score_number(response: str, sample: Sample, hints: ScoringHints) -> Verdict:
    answer = extract_answer(response)
    number = None if answer is None else parse_number(answer)
    if answer is None or number is None:
        return _unparsed("no number in the answer")
    if parse_number(sample.answer) is None:
        return _compare_text(answer, sample, hints, "gold is not a number; compared as text")
    return _result(_number_rule(hints)(answer, sample.answer), answer)


def score_yesno(response: str, sample: Sample, hints: ScoringHints) -> Verdict:
    gold = yesno_label(sample.answer, digits=True)
    answer = extract_answer(response)
    if answer is None:
        return _unparsed("empty response")
    if gold is None:
        return _compare_text(answer, sample, hints, "gold is not yes/no; compared as text")
    label = yesno_label(answer)
    if label is None:
        return _unparsed("no yes/no in the answer")
    return _result(label == gold, label)


def score_text(response: str, sample: Sample, hints: ScoringHints) -> Verdict:
    gold = sample.answer
    if is_plain_number(gold) and hints.anls is None:
        return score_number(response, sample, hints)
    if yesno_label(gold) is not None and len(gold.split()) == 1 and not hints.answers:
        return score_yesno(response, sample, hints)
    answer = extract_answer(response)
    if answer is None:
        return _unparsed("empty response")
    return _compare_text(answer, sample, hints)


def _compare_text(
    answer: str, sample: Sample, hints: ScoringHints, detail: str | None = None
) -> Verdict:
    golds = [sample.answer, *hints.answers]
    correct = exact_match(answer, golds)
    score = anls(answer, golds, hints.anls) if hints.anls is not None else float(correct)
    return Verdict(correct, score, True, answer, "rule", detail)


def _gold_key(gold: str, options: Mapping[str, str]) -> str | None:
    keys = {str(k).strip().upper(): k for k in options}
    if gold.strip().upper() in keys:
        return keys[gold.strip().upper()]
    matches = [k for k, v in options.items() if normalize_text(str(v)) == normalize_text(gold)]
    return matches[0] if len(matches) == 1 else None


def score_choice(response: str, sample: Sample, hints: ScoringHints) -> Verdict:
    if not sample.options:
        raise ValueError(
            f"sample {sample.id!r} has answer_type='choice' but no options; the benchmark "
            f"loader must fill Sample.options (letter -> text) or use another answer_type."
        )
    gold = _gold_key(sample.answer, sample.options)
    if gold is None:
        answer = extract_answer(response)
        if answer is None:
            return _unparsed("empty response")
        return _compare_text(answer, sample, hints, "gold is not an option; compared as text")
    pred = extract_choice(response, sample.options)
    if pred is None:
        return _unparsed("no option could be read from the response")
    return _result(pred == gold, pred)


def _letter_gold(response: str, gold: str) -> Verdict:
    """A bare-letter gold without options (MathVerse multi-choice): read a letter only."""
    letters = ascii_uppercase[: max(ascii_uppercase.index(gold.upper()) + 1, 4)]
    options = {letter: "" for letter in letters}
    pred = extract_choice(response, options)
    if pred is None:
        return _unparsed("no option letter could be read from the response")
    return _result(pred == gold.upper(), pred)


def score_math(response: str, sample: Sample, hints: ScoringHints) -> Verdict:
    gold = sample.answer.strip()
    if looks_like_list(gold):
        return score_list(response, sample, hints)
    if sample.options:
        return score_choice(response, sample, hints)
    if len(gold) == 1 and gold.isalpha():
        return _letter_gold(response, gold)
    answer = extract_answer(response)
    if answer is None:
        return _unparsed("empty response")
    has_tolerance = hints.precision is not None or hints.relaxed_tol is not None
    if has_tolerance and is_plain_number(gold) and parse_number(answer) is not None:
        return _result(_number_rule(hints)(answer, gold), answer)
    same = check_math(answer, gold)
    if same is None:
        return _compare_text(answer, sample, hints, "math-verify undecided; compared as text")
    return _result(same, answer)


def score_list(response: str, sample: Sample, hints: ScoringHints) -> Verdict:
    answer = extract_answer(response)
    if answer is None:
        return _unparsed("empty response")
    pred, gold = split_list(answer), split_list(sample.answer)
    if not pred:
        return _unparsed("no list items in the answer")
    same = lists_match(pred, gold, _number_rule(hints), ordered=hints.list_order)
    return _result(same, answer)


Scorer = Callable[[str, Sample, ScoringHints], Verdict]
SCORERS: dict[str, Scorer] = {
    "choice": score_choice,
    "number": score_number,
    "yesno": score_yesno,
    "text": score_text,
    "math": score_math,
    "list": score_list,
}


def _needs_judge(verdict: Verdict, sample: Sample, hints: ScoringHints) -> bool:
    if not verdict.parsed:
        return True
    return sample.answer_type == "text" and not verdict.correct and hints.anls is None


def _reference(sample: Sample) -> str:
    gold = sample.answer
    if sample.options:
        key = _gold_key(gold, sample.options)
        if key is not None:
            return f"{key}. {sample.options[key]}"
    return gold


def _ask_judge(response: str, sample: Sample, verdict: Verdict, judge: Judge) -> Verdict:
    answer = verdict.prediction or extract_answer(response) or response.strip()[-2000:]
    if not answer:
        return verdict
    result = judge(sample.question, answer, _reference(sample))
    if result.correct is None:
        return verdict
    cached = " (cached)" if result.cached else ""
    detail = f"judge {judge.model_name}/{judge.prompt_version}{cached}: {result.raw.strip()}"
    return Verdict(result.correct, float(result.correct), True, answer, "judge", detail)


def verify(
    response: str,
    sample: Sample,
    *,
    judge: Judge | None = None,
    tolerance: float | None = None,
) -> Verdict:
    """Score `response` against `sample` (see the module docstring for the rules).

    `tolerance` is the default relative tolerance for numeric answers (e.g. 0.05 for a whole
    ChartQA run); a sample's own `relaxed_tol` or `precision` overrides it.
    """
    scorer = SCORERS.get(sample.answer_type)
    if scorer is None:
        raise ValueError(
            f"sample {sample.id!r}: answer_type={sample.answer_type!r} has no scorer; "
            f"use one of {sorted(SCORERS)}."
        )
    hints = hints_from_metadata(sample, tolerance)
    verdict = scorer(response, sample, hints)
    if judge is not None and _needs_judge(verdict, sample, hints):
        return _ask_judge(response, sample, verdict, judge)
    return verdict
