"""Numbers in answers: parsing and comparison with a benchmark's tolerance.

Parsing (`parse_numbers`) reads "1,234", "-3.5", "−246" (Unicode minus), "1.2e-3",
"1.2 × 10^3", "45%", "3/4", "\\frac{3}{4}", ".5" and, when the text has no digits, the number
words zero..twenty and the tens ("forty"). Units and magnitude words ("cm", "million", "K") are
ignored: a chart's axis already states the unit, and ChartQA-Pro gold "28.2 million" is read as
28.2, as its official scorer does. When a text holds several numbers, the answer is the last one
("L ≈ 14.32, rounded down: 14" gives 14).

Comparison (`check_number`), in this order:

1. Years are exact: when the gold is a 4-digit integer in 1800..2100 written without decimals
   (or the caller says it is a year), the prediction must equal it; ChartQA's 5% tolerance
   would otherwise accept 1950 for 2013 (limit: a gold quantity like "2000" is treated as a
   year unless `year=False`).
2. `precision` (MathVista): both sides are rounded to that many decimals with Python's
   `round`, as MathVista's own scorer does, then compared.
3. Tolerances: |pred - gold| <= rel_tol * |gold| (ChartQA relaxed accuracy, relative to the
   gold, not to the larger side as `math.isclose` would) or <= abs_tol. With neither given,
   the comparison is exact up to float noise (relative 1e-9).

Percentages: a side written with "%" may be read as its value or as that value / 100, so
"45%" matches gold "45" and gold "0.45", and "0.45" matches gold "45%". Both readings mean the
same quantity, and benchmarks disagree on which one they store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FLOAT_NOISE = 1e-9
YEAR_RANGE = (1800, 2100)

_MINUS = "-−–"
_NUMBER = re.compile(
    r"(?P<frac>\\[dt]?frac\{\s*(?P<fn>[-−–]?\d+)\s*\}\{\s*(?P<fd>\d+)\s*\})"
    r"|(?<![\w.])(?P<sign>[-−–])?\$?\s?"
    r"(?:(?P<num>\d+)\s*/\s*(?P<den>\d+)(?![\d.])"
    r"|(?P<value>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?:[eE](?P<exp>[-+]?\d+)|\s*[x×*]\s*10\s*\^\s*\{?(?P<exp10>[-+]?\d+)\}?)?)"
    r"(?P<pct>\s*(?:%|\\%|percent\b))?"
)
_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60,
    "seventy": 70, "eighty": 80, "ninety": 90,
}  # fmt: skip
_WORD_RE = re.compile(r"\b(" + "|".join(_WORDS) + r")\b", re.I)


@dataclass(frozen=True)
class ParsedNumber:
    """One number read from text.

    `decimals` is the count of digits written after the decimal point (0 for "14", 1 for
    "11.8"); `integer_literal` is True when the text wrote a plain integer (no point, fraction
    or exponent), which is what makes "2013" a candidate year.
    """

    value: float
    percent: bool = False
    decimals: int = 0
    integer_literal: bool = False
    text: str = ""


def parse_numbers(text: str) -> list[ParsedNumber]:
    """Every number in `text`, in order (see the module docstring for the forms read)."""
    found = [_from_match(m) for m in _NUMBER.finditer(text)]
    if found:
        return found
    return [
        ParsedNumber(float(_WORDS[m.group(1).lower()]), integer_literal=True, text=m.group(0))
        for m in _WORD_RE.finditer(text)
    ]


def _from_match(match: re.Match[str]) -> ParsedNumber:
    percent = bool(match.group("pct"))
    if match.group("frac"):
        numerator = float(match.group("fn").replace("−", "-").replace("–", "-"))
        value = numerator / float(match.group("fd")) if float(match.group("fd")) else float("nan")
        return ParsedNumber(value, percent, text=match.group(0))
    sign = -1.0 if match.group("sign") else 1.0
    if match.group("num"):
        den = float(match.group("den"))
        value = float(match.group("num")) / den if den else float("nan")
        return ParsedNumber(sign * value, percent, text=match.group(0))
    literal = match.group("value").replace(",", "")
    exponent = match.group("exp") or match.group("exp10")
    value = float(literal) * (10.0 ** int(exponent) if exponent else 1.0)
    decimals = len(literal.split(".")[1]) if "." in literal else 0
    integer = "." not in literal and exponent is None
    return ParsedNumber(sign * value, percent, decimals, integer, match.group(0))


def parse_number(text: str) -> ParsedNumber | None:
    """The answer's number: the last one in `text`, or None when there is none."""
    numbers = parse_numbers(text)
    numbers = [n for n in numbers if n.value == n.value]  # drop NaN from "x/0"
    return numbers[-1] if numbers else None


def is_year(number: ParsedNumber) -> bool:
    """True for a plain 4-digit integer in 1800..2100 (the ChartQA year rule)."""
    return (
        number.integer_literal
        and not number.percent
        and YEAR_RANGE[0] <= number.value <= YEAR_RANGE[1]
        and len(number.text.strip().lstrip(_MINUS + "$ ")) == 4
    )


def _readings(number: ParsedNumber) -> list[float]:
    """The values a number may mean: "45%" is 45 or 0.45."""
    return [number.value, number.value / 100.0] if number.percent else [number.value]


def _as_number(value: str | float | int | ParsedNumber) -> ParsedNumber | None:
    if isinstance(value, ParsedNumber):
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        integer = isinstance(value, int)
        return ParsedNumber(float(value), integer_literal=integer, text=str(value))
    return parse_number(value)


def numbers_match(
    pred: float,
    gold: float,
    *,
    rel_tol: float | None = None,
    abs_tol: float | None = None,
    precision: int | None = None,
) -> bool:
    """One comparison of two values: rounded to `precision`, or within the tolerances."""
    if precision is not None:
        return round(pred, precision) == round(gold, precision)
    difference = abs(pred - gold)
    if rel_tol is None and abs_tol is None:
        return difference <= _FLOAT_NOISE * max(abs(gold), 1.0)
    within_relative = difference <= (rel_tol or 0.0) * abs(gold) + _FLOAT_NOISE
    within_absolute = abs_tol is not None and difference <= abs_tol
    return within_relative or within_absolute


def check_number(
    pred: str | float | ParsedNumber,
    gold: str | float | ParsedNumber,
    *,
    rel_tol: float | None = None,
    abs_tol: float | None = None,
    precision: int | None = None,
    year: bool | None = None,
) -> bool:
    """True when the prediction's number equals the gold's under the benchmark's rule.

    `rel_tol=0.05` is ChartQA's relaxed accuracy; `precision` is MathVista's rounding; `year`
    forces (True) or disables (False) the exact-year rule, None detects it from the gold. An
    unreadable prediction or gold is never correct.
    """
    p, g = _as_number(pred), _as_number(gold)
    if p is None or g is None:
        return False
    exact_year = is_year(g) if year is None else year
    if exact_year:
        return p.value == g.value and not p.percent
    return any(
        numbers_match(pv, gv, rel_tol=rel_tol, abs_tol=abs_tol, precision=precision)
        for pv in _readings(p)
        for gv in _readings(g)
    )


def is_plain_number(text: str) -> bool:
    """True when `text` is one number with at most a short unit ("11.8", "2191.7 metres", "45%").

    Such golds are compared numerically; anything else ("S 23.5° W", "x^2") is not.
    """
    return bool(
        re.fullmatch(
            r"\s*[-−–]?\$?\s?(\d{1,3}(,\d{3})+|\d+)?(\.\d+)?\s*"
            r"(%|°|\\%|\^\s*\\circ|\^\{\\circ\}|[a-zA-Z²³ ]{1,16})?\s*",
            text,
        )
    ) and bool(re.search(r"\d", text))
