"""Grid-coordinate answers: "(4,7)", "(10, 9)", "10,5", "Row 4 Column 17".

BabyVision's find-the-different items (and GameQA's board questions) state their gold as a tuple
of integers in whatever spelling the question asked for. The official BabyVision scorer leaves
the comparison to an LLM judge; the rule here decides the clear cases without one: the gold's
integers, in order, must equal the prediction's. A prediction that also carries other numbers
("(4, 7) in the 7x7 grid") is read by its last bracketed group of the gold's length; one whose
integers cannot be lined up with the gold's is unreadable (None), which sends the item to the
judge when there is one.
"""

from __future__ import annotations

import re

from beacon.types import Sample
from beacon.verify import Judge, Verdict, extract_answer
from beacon.verify.fallback import judge_unparsed

_INTEGER = re.compile(r"-?\d+")
_GROUP = re.compile(r"[\(\[]([^()\[\]]*)[\)\]]")
_LABEL_WORDS = re.compile(r"\b(?:rows?|columns?|cols?|r|c|x|y|and)\b", re.IGNORECASE)
_SEPARATORS = re.compile(r"[\s()\[\],;:=\-]*")


def is_coordinate(gold: str) -> bool:
    """True when `gold` is two or more integers with nothing but brackets, commas and the
    words row / column between them ("(4,7)", "10, 5", "Row 4 Column 17")."""
    if len(_INTEGER.findall(gold)) < 2:
        return False
    rest = _LABEL_WORDS.sub(" ", _INTEGER.sub(" ", gold))
    return _SEPARATORS.fullmatch(rest) is not None


def coordinate_values(text: str) -> tuple[int, ...] | None:
    """The integers of `text` when it is a coordinate and nothing else (`is_coordinate`), so
    "(2,6)" and "2, 6" both give (2, 6); None for any other text."""
    return tuple(int(n) for n in _INTEGER.findall(text)) if is_coordinate(text) else None


def read_coordinates(answer: str, arity: int) -> tuple[int, ...] | None:
    """The `arity` integers the answer gives, or None when they cannot be told apart.

    All integers of the answer when there are exactly `arity`; else the last bracketed group
    holding exactly `arity` integers.
    """
    numbers = [int(n) for n in _INTEGER.findall(answer)]
    if len(numbers) == arity:
        return tuple(numbers)
    for group in reversed(_GROUP.findall(answer)):
        inside = [int(n) for n in _INTEGER.findall(group)]
        if len(inside) == arity:
            return tuple(inside)
    return None


def coordinates_match(answer: str, gold: str) -> bool | None:
    """True / False when the answer's coordinates can be read, None when they cannot."""
    wanted = tuple(int(n) for n in _INTEGER.findall(gold))
    found = read_coordinates(answer, len(wanted))
    return None if found is None else found == wanted


def verify_coordinates(response: str, sample: Sample, judge: Judge | None = None) -> Verdict:
    """The verdict for a coordinate gold (`sample.answer`); the judge only when unreadable."""
    answer = extract_answer(response)
    same = None if answer is None else coordinates_match(answer, sample.answer)
    if same is None:
        verdict = Verdict(False, 0.0, False, None, "rule", "no coordinates in the answer")
        return judge_unparsed(response, sample, verdict, judge, sample.answer)
    return Verdict(same, float(same), True, answer, "rule")
