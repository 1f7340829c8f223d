"""HGCE's answer-free hint check (paper §3 "Hint-Guided Capability Expansion", beacon.md §4 step 2).

A hint may carry sub-goals and a tool strategy, never the answer. `hint_leaks` is deliberately
conservative: a false alarm only costs one regenerated (or skipped) hint, a missed leak teaches the
policy to copy answers from a prompt it never sees at test time. It flags a hint that contains

1. the normalized reference answer as a whole phrase (case, punctuation, hyphens, Unicode width
   and repeated spaces ignored);
2. for a symbolic answer ("x^2+1", "3/4"), the answer with all spaces removed;
3. for a choice item, the correct option's letter used as a reference ("(B)", "option b",
   "B)", "B." or a standalone capital B; a sentence-initial article "A" before a lower-case
   word is not one),
   or the correct option's text as a phrase;
4. any number in the answer (or a number-word up to 20, or the option text's number), compared
   numerically: "1,000" = "1000" = "1000.0", "1/2" = "0.5", and a percentage also matches its
   fraction;
5. an answer with letters spelled out with separators between its characters ("4 9 E",
   "4-9-E", "s.t.o.p" for "49E" / "stop"), as a code-reading hint could write it.

What is not covered: paraphrases ("the colour of the sky" for "blue"), arithmetic the hint leaves
to the reader ("add 40 and 2"), an option named by position ("the second option"), a lower-case
letter without a keyword ("c." for C), other languages. An LLM judge would be the next layer.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping

_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?%?")
_NUMBER_WORD_TEXT = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty"
)
_NUMBER_WORDS = {word: value for value, word in enumerate(_NUMBER_WORD_TEXT.split())}
_REL_TOL = 1e-9


def normalize_text(text: str) -> str:
    """NFKC, lower case, punctuation and hyphens to spaces, single spaces: for phrase matching."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = re.sub(r"[^\w\s.%/^+=-]|[-_]", " ", text)
    text = re.sub(r"(?<!\d)\.|\.(?!\d)", " ", text)  # a dot is punctuation unless inside a number
    return " ".join(text.split())


def _contains_phrase(haystack: str, needle: str) -> bool:
    if not needle:
        return False
    return re.search(r"(?<!\w)" + re.escape(needle) + r"(?!\w)", haystack) is not None


def _numbers(text: str) -> list[float]:
    """Every number written in `text` (digits or number-words up to twenty); percentages twice."""
    text = unicodedata.normalize("NFKC", text)
    values = []
    for match in _NUMBER.finditer(text):
        token = match.group(0)
        if not any(ch.isdigit() for ch in token):
            continue
        percent = token.endswith("%")
        try:
            value = float(token.rstrip("%").replace(",", ""))
        except ValueError:
            continue
        values.append(value)
        if percent:
            values.append(value / 100.0)
    # Digit runs on their own too: "(100,200)" is a coordinate pair as often as it is 100200.
    values.extend(float(run) for run in re.findall(r"\d+(?:\.\d+)?", text))
    for num, den in re.findall(r"(\d+)\s*/\s*(\d+)", text):
        if float(den) != 0:
            values.append(float(num) / float(den))  # "1/2" also matches 0.5
    words = re.findall(r"[a-z]+", text.lower())
    values.extend(float(_NUMBER_WORDS[w]) for w in words if w in _NUMBER_WORDS)
    return values


def _same_number(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=_REL_TOL, abs_tol=1e-12)


def _letter_referenced(hint: str, letter: str) -> bool:
    """The option letter used as a reference in `hint` (see the module docstring, rule 3)."""
    escaped = re.escape(letter)
    keyword = (
        rf"(?i:\b(?:option|choice|answer|candidate)\s*(?:is\s*)?[:\-]?\s*\(?){escaped}(?![a-z])"
    )
    if re.search(keyword, hint, re.I if letter.isalpha() else 0):
        return True
    if re.search(rf"[(\[]\s*{escaped}\s*[)\]]|(?<![\w]){escaped}[).:]", hint):
        return True
    for match in re.finditer(rf"(?<![\w]){escaped}(?![\w])", hint):
        sentence_start = re.search(r"(?:^|[.!?:]\s+|\n\s*)$", hint[: match.start()])
        if letter == "A" and sentence_start and re.match(r"\s+[a-z]", hint[match.end() :]):
            continue  # the article "A", as in "A crop of the corner shows..."
        return True
    return False


def leak_reasons(hint: str, answer: str, options: Mapping[str, str] | None = None) -> list[str]:
    """Why `hint` gives away `answer` (empty when it does not); rules in the module docstring."""
    reasons = []
    norm_hint = normalize_text(hint)
    answer = answer.strip()
    letter = _correct_letter(answer, options)
    is_letter = letter is not None and answer.strip("()").strip().upper() == letter.upper()
    # A letter answer is checked by rule 3 only: "a" is also an English word.
    if not is_letter and _contains_phrase(norm_hint, normalize_text(answer)):
        reasons.append(f"contains the answer {answer!r}")
    compact = re.sub(r"\s+", "", unicodedata.normalize("NFKC", answer)).lower()
    compact_hint = re.sub(r"\s+", "", unicodedata.normalize("NFKC", hint)).lower()
    if len(compact) >= 3 and not compact.isalnum() and compact in compact_hint:
        reasons.append(f"contains the expression {answer!r}")
    targets = [answer]
    if letter is not None and options is not None:
        option_text = options[letter]
        targets.append(option_text)
        if _letter_referenced(hint, letter):
            reasons.append(f"names the correct option {letter!r}")
        if _contains_phrase(norm_hint, normalize_text(option_text)):
            reasons.append(f"contains the correct option's text {option_text!r}")
    spelled = _spelled_out(answer)
    if spelled is not None and re.search(spelled, unicodedata.normalize("NFKC", hint), re.I):
        reasons.append(f"spells out the answer {answer!r}")
    hint_numbers = _numbers(hint)
    for target in targets:
        for value in _numbers(target):
            if any(_same_number(value, h) for h in hint_numbers):
                reasons.append(f"contains the number {value:g} of the answer")
                break
    return reasons


def _spelled_out(answer: str) -> str | None:
    """Rule 5: a pattern for the answer's characters with separators between them."""
    chars = re.sub(r"\s+", "", unicodedata.normalize("NFKC", answer))
    if not 2 <= len(chars) <= 12 or not chars.isalnum() or chars.isdigit():
        return None
    return r"(?<!\w)" + r"[\s\-.,'\"/_]*".join(map(re.escape, chars)) + r"(?!\w)"


def hint_leaks(hint: str, answer: str, options: Mapping[str, str] | None = None) -> bool:
    """True when `hint` contains the reference answer in any form `leak_reasons` checks."""
    return bool(leak_reasons(hint, answer, options))


def _correct_letter(answer: str, options: Mapping[str, str] | None) -> str | None:
    """The correct option's letter: the answer itself, or the option whose text is the answer."""
    if not options:
        return None
    stripped = answer.strip().strip("()").strip()
    if stripped in options:
        return stripped
    if stripped.upper() in options:
        return stripped.upper()
    norm = normalize_text(answer)
    return next((k for k, v in options.items() if normalize_text(v) == norm), None)
