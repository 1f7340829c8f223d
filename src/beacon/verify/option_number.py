"""Options answered by number: "3", "Option 3", "(3)", or the option's own text.

GameQA's board games list their options as "1: ...", "2: ..." (Snake from 0) and state the gold
as that number; the official evaluator hands the judge "The correct option is {n}: {text}".
The rule here reads the option whose text the answer is (normalized equality; for coordinate
options also the same integers, "(2,6)" for "(2, 6)"), else the number the answer starts with,
and leaves anything else to the judge. The option's text goes first because many games' options
are numbers or coordinates themselves: Sokoban's options ["(6, 4)", "(4, 4)", "(2, 6)", ...]
make "(2, 6)" option 3, where its first number would name option 2, and the options ["7", ...,
"3"] make "3" option 8.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from beacon.types import Sample
from beacon.verify import Judge, Verdict, extract_answer, normalize_text
from beacon.verify.coordinates import coordinate_values
from beacon.verify.fallback import judge_unparsed

_LEADING_NUMBER = re.compile(r"^\s*(?:option\s*)?[\(\[]?(\d+)[\)\]]?(?=$|[\s.:,)])", re.I)


def read_option_number(answer: str | None, texts: Sequence[str], base: int = 1) -> int | None:
    """The option number an answer picks (options numbered from `base`), or None.

    The number of the one option whose text the answer is (see the module docstring), else its
    leading number when that names an option ("1-right-forward" is not a leading number).
    """
    if answer is None:
        return None
    wanted, point = normalize_text(answer), coordinate_values(answer)
    hits = [
        n
        for n, option in enumerate(texts, base)
        if normalize_text(option) == wanted
        or (point is not None and coordinate_values(option) == point)
    ]
    if len(hits) == 1:
        return hits[0]
    lead = _LEADING_NUMBER.match(answer)
    if lead is not None and base <= int(lead.group(1)) < base + len(texts):
        return int(lead.group(1))
    return None


def verify_option_number(
    response: str, sample: Sample, texts: Sequence[str], base: int, judge: Judge | None = None
) -> Verdict:
    """The verdict for a gold option number (`sample.answer`); the judge only when unreadable."""
    pick = read_option_number(extract_answer(response), texts, base)
    if pick is None:
        verdict = Verdict(False, 0.0, False, None, "rule", "no option in the answer")
    else:
        right = str(pick) == sample.answer
        verdict = Verdict(right, float(right), True, str(pick), "rule")
    shown = texts[int(sample.answer) - base]
    reference = f"The correct option is {sample.answer}: {shown}"
    return judge_unparsed(response, sample, verdict, judge, reference)
