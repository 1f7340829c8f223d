"""Text normalization, yes/no labels, ANLS with hand-computed values."""

from __future__ import annotations

import pytest

from beacon.verify import anls, exact_match, normalize_text, yesno_label
from beacon.verify.text import levenshtein


def test_normalize_text() -> None:
    assert normalize_text("  The Cat, sat! ") == "cat sat"
    assert normalize_text("0.57") == "0.57"
    assert normalize_text("1,234") == "1,234"
    assert normalize_text("−5") == "-5"
    assert normalize_text("S 23.5 ^\\circ W") == normalize_text("S 23.5° W") == "s 23.5° w"
    assert normalize_text("145 degrees") == "145°"


def test_exact_match() -> None:
    assert exact_match("inspired.", "Inspired")
    assert exact_match("the Mars", ["Venus", "Mars"])
    assert not exact_match("-5", "5")
    assert not exact_match("Apr", "April")


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("Yes", "yes"),
        ("yes.", "yes"),
        ("No, the right and left orange circles appear to be the same size.", "no"),
        (" Yes, the grey box on the right appears to be the same size.", "yes"),
        ("True", "yes"),
        ("false", "no"),
        ("The answer is no", "no"),
        ("There is no doubt; yes.", None),  # both words, neither first
        ("The circles are equal.", None),
        ("", None),
        ("1", None),  # predictions are never read as digits
    ],
)
def test_yesno_label(text: str, label: str | None) -> None:
    assert yesno_label(text) == label


def test_yesno_digits_for_hallusionbench_gold() -> None:
    assert yesno_label("1", digits=True) == "yes"
    assert yesno_label("0", digits=True) == "no"


def test_levenshtein() -> None:
    assert levenshtein("kitten", "sitting") == 3
    assert levenshtein("", "abc") == 3
    assert levenshtein("same", "same") == 0


def test_anls_hand_values() -> None:
    # "inspire" vs "inspired": distance 1, longer length 8 -> NL = 0.125 -> 0.875.
    assert anls("Inspire", "Inspired") == pytest.approx(0.875, abs=1e-12)
    # "apr" vs "april": distance 2, length 5 -> NL = 0.4 < 0.5 -> 0.6.
    assert anls("Apr", "April") == pytest.approx(0.6, abs=1e-12)
    # NL = 0.6 >= 0.5 -> 0; a looser threshold accepts it.
    assert anls("ab", "abcde") == 0.0
    assert anls("ab", "abcde", threshold=0.7) == pytest.approx(0.4, abs=1e-12)
    # The best of several golds; case and outer spaces ignored.
    assert anls(" PARIS ", ["London", "paris"]) == 1.0
    assert anls("", "") == 1.0
