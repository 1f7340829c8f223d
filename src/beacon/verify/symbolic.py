"""Symbolic and LaTeX answers, checked with `math-verify` inside our own time budget.

Snags of math-verify 0.9 this module works around:

1. Its `parse(..., parsing_timeout=5)` and `verify(..., timeout_seconds=5)` use `signal.alarm`,
   which raises inside worker threads (the evaluator scores from threads). Both timeouts are
   disabled (`None`); instead each check runs in a helper process that is killed when it
   overruns `time_budget_s` (`beacon.verify.mathworker`: a thread cannot be stopped, and sympy
   computing `10^{10^{10}}` holds the GIL so long that even `join(timeout)` never returns).
   An overrun is reported as undecided. Where helpers cannot be started, the check falls back
   to a daemon thread joined with the budget (which cannot stop such GIL-holding work).
   math-verify's one-time warning about the disabled timeouts is filtered out.
2. A bare letter ("A") parses to nothing: such golds are not math; `check_math` returns None
   and the caller compares text or options.
3. `$[2007, 2008]$` parses as an interval: list answers are routed to the list scorer before
   this module is reached.
4. Floats are compared at 6 decimals inside math-verify, so gold "14.3" would reject
   `\\sqrt{205}` = 14.317. Numbers are therefore compared here first, the prediction rounded to
   the gold's written decimals ("round floats first").
5. Answers equal as normalized text ("S 23.5° W" vs "S 23.5 ^\\circ W") are equal before
   math-verify is asked.

Compass bearings ("S 23.5° W") parse to their number alone, so a bearing gold also requires the
prediction to start and end with the same compass letters.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable
from typing import TypeVar

from beacon.verify.mathworker import MathWorkerPool, Overran, WorkerUnavailable
from beacon.verify.numbers import ParsedNumber, is_plain_number, numbers_match, parse_number
from beacon.verify.text import normalize_text

logger = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_TIME_BUDGET_S = 5.0
_MAX_CHARS = 400  # longer "answers" are reasoning, not expressions; parsing them can hang sympy
_BEARING = re.compile(r"^\s*([NS])\b.*\b([EW])\s*$")
_TIMED_OUT = object()
_POOL = MathWorkerPool(size=min(4, os.cpu_count() or 1))
_helpers_unavailable = False


class _DropDisabledTimeoutWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropDisabledTimeoutWarning())


def run_with_budget(fn: Callable[[], T], time_budget_s: float) -> T | object:
    """`fn()` in a daemon thread; its result, or `_TIMED_OUT` if it overran or raised."""
    box: list[object] = [_TIMED_OUT]

    def target() -> None:
        try:
            box[0] = fn()
        except Exception:
            logger.debug("math-verify raised; treating the answer as undecided", exc_info=True)

    worker = threading.Thread(target=target, daemon=True, name="beacon-math-verify")
    worker.start()
    worker.join(time_budget_s)
    if worker.is_alive():
        logger.warning("math-verify overran its %.1f s budget; answer undecided", time_budget_s)
        return _TIMED_OUT
    return box[0]


def parse_math(text: str) -> list:
    """math-verify's parse, LaTeX-wrapped first when the text looks like LaTeX.

    math-verify (with sympy) is imported here, not at module level: it takes ~0.25 s, which
    `import beacon.verify` should not cost callers that never score a math answer.
    """
    from math_verify import parse as mv_parse

    looks_latex = "\\" in text or "^" in text or "{" in text
    wrapped = text if "$" in text or "\\boxed" in text else f"${text}$"
    attempts = [wrapped, text] if looks_latex else [text, wrapped]
    for attempt in attempts:
        parsed = mv_parse(attempt, parsing_timeout=None)
        if parsed:
            return parsed
    return []


def _numeric_value(text: str) -> float | None:
    """The value of a plain number, of an expression that evaluates to one (`\\sqrt{205}`), or
    else the last number in the text."""
    if is_plain_number(text):
        number = parse_number(text)
        return None if number is None else number.value
    parsed = parse_math(text)
    if parsed and getattr(parsed[0], "is_number", False):
        try:
            return float(parsed[0].evalf())
        except (TypeError, ValueError):
            return None
    number = parse_number(text)
    return None if number is None else number.value


def _check_number_gold(pred: str, gold: ParsedNumber) -> bool:
    value = _numeric_value(pred)
    if value is None:
        return False
    precision = gold.decimals if gold.decimals > 0 else None
    return numbers_match(value, gold.value, precision=precision)


def _bearing_consistent(pred: str, gold: str) -> bool:
    gold_match = _BEARING.match(gold)
    if gold_match is None:
        return True
    pred_match = _BEARING.match(pred)
    return pred_match is not None and pred_match.groups() == gold_match.groups()


def _equal_as_text(pred: str, gold: str) -> bool:
    if pred.strip().lower() == gold.strip().lower():
        return True
    normalized = normalize_text(gold)
    return bool(normalized) and normalize_text(pred) == normalized


def _is_letter(gold: str) -> bool:
    """An option letter, not math (math-verify's plain parse gives nothing for it)."""
    return re.fullmatch(r"\s*[A-Za-z]\s*", gold) is not None


def compare_in_process(pred: str, gold: str) -> bool | None:
    """The whole check in this process, with no time limit (the helper processes run this)."""
    if _equal_as_text(pred, gold):
        return True
    if _is_letter(gold):
        return None
    if is_plain_number(gold):
        number = parse_number(gold)
        if number is not None:
            return _check_number_gold(pred, number)
    gold_parsed = parse_math(gold)
    if not gold_parsed:
        return None
    pred_parsed = parse_math(pred)
    if not pred_parsed:
        return False
    from math_verify import verify as mv_verify

    same = mv_verify(gold_parsed, pred_parsed, timeout_seconds=None)
    return bool(same) and _bearing_consistent(pred, gold)


def check_math(
    pred: str, gold: str, *, time_budget_s: float = DEFAULT_TIME_BUDGET_S
) -> bool | None:
    """True/False when the answers are (not) mathematically equal; None when undecidable.

    None means the gold is not math (a letter, a word), the input is too long to be an
    expression, or the check overran `time_budget_s`. Never raises, never hangs (see the
    module docstring for the one exception: hosts where no helper process can start).
    """
    if len(pred) > _MAX_CHARS or len(gold) > _MAX_CHARS:
        return None
    if _equal_as_text(pred, gold):
        return True
    if _is_letter(gold):
        return None
    return _run_isolated(pred, gold, time_budget_s)


def _run_isolated(pred: str, gold: str, time_budget_s: float) -> bool | None:
    global _helpers_unavailable
    if not _helpers_unavailable:
        try:
            return _POOL.check(pred, gold, time_budget_s)
        except Overran as overrun:
            logger.warning("math-verify check abandoned (%s); answer undecided", overrun)
            return None
        except WorkerUnavailable as error:
            _helpers_unavailable = True
            logger.warning("%s; math checks fall back to threads for this process", error)
    result = run_with_budget(lambda: compare_in_process(pred, gold), time_budget_s)
    return None if result is _TIMED_OUT else result  # type: ignore[return-value]
