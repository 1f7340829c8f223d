"""Number parsing and check_number: MathVista precision, ChartQA relaxed accuracy, years, %."""

from __future__ import annotations

import pytest

from beacon.verify import check_number, parse_number, parse_numbers
from beacon.verify.numbers import is_plain_number, is_year


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("14", 14.0),
        ("1,234", 1234.0),
        ("1,234,567.5", 1234567.5),
        ("-3.5", -3.5),
        ("−246", -246.0),  # Unicode minus (ChartQA-Pro gold)
        ("1.2e-3", 0.0012),
        ("2.5 × 10^3", 2500.0),
        ("3/4", 0.75),
        ("\\frac{3}{4}", 0.75),
        ("\\dfrac{-1}{2}", -0.5),
        (".5", 0.5),
        ("$12", 12.0),
        ("45%", 45.0),
        ("28.2 million", 28.2),  # magnitude words are units
        ("423K", 423.0),
        ("L ≈ 14.32, rounded down: 14", 14.0),  # the last number is the answer
        ("[94.7]", 94.7),
        ("There are three people", 3.0),
        ("forty", 40.0),
    ],
)
def test_parse_number(text: str, value: float) -> None:
    number = parse_number(text)
    assert number is not None
    assert number.value == pytest.approx(value, rel=1e-12)


def test_unreadable_numbers() -> None:
    assert parse_number("no digits here") is None
    assert parse_number("1/0") is None
    assert parse_number("someone") is None


def test_percent_and_decimals_are_recorded() -> None:
    number = parse_number("20.25%")
    assert number is not None and number.percent and number.decimals == 2
    assert [n.value for n in parse_numbers("2007, 2008")] == [2007.0, 2008.0]


def test_mathvista_precision_rounds_like_its_scorer() -> None:
    assert check_number("1.23", "1.2", precision=1)
    assert not check_number("1.26", "1.2", precision=1)
    # Python's round, as MathVista's scorer uses it: 1.25 is stored below 1.25 and rounds to 1.2.
    assert check_number("1.25", "1.2", precision=1)
    assert check_number("The answer is 1000 g", "1000", precision=0)


def test_exact_without_tolerance() -> None:
    assert check_number("4.0", "4")
    assert not check_number("3.9", "4")
    assert check_number("0.1", 0.1)
    assert check_number(0.1 + 0.2, "0.3")  # float noise only


def test_chartqa_relaxed_accuracy_is_relative_to_gold() -> None:
    assert check_number("0.59", "0.57", rel_tol=0.05)  # 3.5 % off
    assert not check_number("0.6", "0.57", rel_tol=0.05)  # 5.3 % off
    # Relative to the gold (not the larger side): 105 vs 100 is within, 100 vs 105.3 is not.
    assert check_number("105", "100", rel_tol=0.05)
    assert not check_number("100", "105.3", rel_tol=0.05)
    assert check_number("0", "0", rel_tol=0.05)
    assert not check_number("0.01", "0", rel_tol=0.05)
    assert check_number("0.01", "0", abs_tol=0.01)


def test_years_are_exact() -> None:
    assert not check_number("2012", "2013", rel_tol=0.05)
    assert check_number("In 2013.", "2013", rel_tol=0.05)
    assert check_number("2012", "2013", rel_tol=0.05, year=False)
    assert not check_number("48", "47", rel_tol=0.05, year=True)
    assert check_number("1950", "2000.0", rel_tol=0.05)  # "2000.0" is written as a quantity
    year = parse_number("2013")
    assert year is not None and is_year(year)
    for text in ("2013.0", "12013", "1799", "2,013"):
        number = parse_number(text)
        assert number is not None and not is_year(number), text


def test_percentages_read_both_ways() -> None:
    assert check_number("45%", "45")
    assert check_number("45%", "0.45")
    assert check_number("0.45", "45%")
    assert check_number("3%", "0.03", rel_tol=0.05)
    assert not check_number("45%", "4.5")


def test_unparsable_is_never_correct() -> None:
    assert not check_number("none", "3")
    assert not check_number("3", "Unanswerable")
    assert not check_number(True, 1)


@pytest.mark.parametrize(
    ("text", "plain"),
    [
        ("11.8", True),
        ("2191.7 metres", True),
        ("45%", True),
        ("145°", True),
        ("-3", True),
        ("1,234", True),
        ("S 23.5 ^\\circ W", False),
        ("x^2", False),
        ("04/25", False),
        ("Inspired", False),
        ("", False),
    ],
)
def test_is_plain_number(text: str, plain: bool) -> None:
    assert is_plain_number(text) is plain
