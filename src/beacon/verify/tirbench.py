"""TIR-Bench's task rules (agents-x-project/TIR-Bench `calculate_score.py`), re-implemented.

The official pipeline has an LLM extract a short answer from each response, then scores it
with one rule per task; two tasks give partial credit. Here our extractor
(`beacon.verify.extract_answer`) reads the answer, the same rules score it, and a judge is asked
only when no answer can be read (see `beacon.verify.fallback`). Rules, by task:

- ocr: the gold must occur, case-sensitively, in the whole response (the official rule reads the
  raw response, not an extracted answer). The official script replaces the gold of the items
  whose `image_1` contains "60.jpg" / "62.jpg" by "mobi" / "aires"; `OCR_GOLD_FIXES` does the
  same, matched on the same substring.
- jigsaw (partial credit): the first run of n² integers (n = `meta_data.difficulty`) separated
  by commas, spaces or newlines, read from the prediction and from the gold; when the extracted
  answer holds no such run (a response that ends with a sentence after its list, which the
  official LLM extractor would still read), the last run in the whole response. The score is
  the fraction of positions that agree,
      score = (1 / n²) · Σ_i [pred_i = gold_i]                                      (1)
- spot_difference (partial credit unless the gold is one integer): the integers of both as
  sets, scored by their intersection over union,
      score = |P ∩ G| / |P ∪ G|                                                     (2)
- word_search: an integer gold is compared as an integer; otherwise the gold's first "a, b"
  pair must equal the answer's two integers ("row 3, column 5"; with more numbers, its first
  "a, b" pair: the official extractor would have reduced the answer to the pair).
- every other task, by the gold's form: letters → an option letter (several letters, "CD":
  the same letters in any order); an integer or a decimal → equal as numbers, with
  math-verify as the fallback (`check_math`); anything else → normalized text match (the
  official script scores such golds 0 and reports them as errors).

A response whose answer cannot be read is unparsed (score 0). `correct` is `score == 1`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from beacon.verify import (
    Verdict,
    check_math,
    check_number,
    extract_answer,
    extract_choice,
    normalize_text,
    parse_number,
)

OCR_GOLD_FIXES = {"60.jpg": "mobi", "62.jpg": "aires"}
PARTIAL_CREDIT_TASKS = ("jigsaw", "spot_difference")
_LETTERS = "ABCDEFGHIJ"
_INTEGER_RUN = re.compile(r"[\d\s,，]+")
_INTEGER = re.compile(r"\d+")
_PAIR = re.compile(r"\b(\d+)\s*,\s*(\d+)\b")
_MULTI_LETTER = re.compile(r"[A-J](?:[\s,，]*(?:and\s+)?[A-J])*")


@dataclass(frozen=True)
class TIRItem:
    """What the rules need about one item besides the response."""

    task: str
    gold: str
    options: Mapping[str, str] | None = None  # letter -> text, when the prompt lists them
    jigsaw_size: int | None = None  # n of an n x n jigsaw (`meta_data.difficulty`)
    image_1: str = ""


def score_tirbench(response: str, item: TIRItem) -> Verdict:
    """The verdict of the task's rule (module docstring); `score` carries partial credit."""
    if item.task == "ocr":
        return _ocr(response, item)
    answer = extract_answer(response)
    if answer is None:
        return _unparsed("no answer could be read")
    answer = answer.replace("*", "").strip()
    if item.task == "jigsaw":
        return _jigsaw(response, answer, item)
    if item.task == "spot_difference" and not item.gold.strip().isdigit():
        return _spot_difference(answer, item.gold)
    if item.task == "word_search" and not item.gold.strip().isdigit():
        return _pair(answer, item.gold)
    return _by_gold_form(response, answer, item)


def ocr_gold(item: TIRItem) -> str:
    """The gold the official script scores an ocr item against (with its two fixes)."""
    for image, gold in OCR_GOLD_FIXES.items():
        if image in item.image_1:
            return gold
    return item.gold


def jigsaw_order(text: str, size: int, *, last: bool = False) -> list[int] | None:
    """The first (or `last`) run of size² integers in `text`, or None.

    A run is integers separated only by commas, spaces and newlines, so "**" or "→" end one.
    The official script takes the first run of the LLM-extracted answer.
    """
    runs = _INTEGER_RUN.findall(text)
    for run in reversed(runs) if last else runs:
        numbers = _INTEGER.findall(run)
        if len(numbers) == size * size:
            return [int(n) for n in numbers]
    return None


def position_accuracy(pred: list[int], gold: list[int]) -> float:
    """Eq. (1): the fraction of positions where the two orders agree."""
    return sum(p == g for p, g in zip(pred, gold, strict=True)) / len(gold)


def set_iou(pred: set[int], gold: set[int]) -> float:
    """Eq. (2): intersection over union; two empty sets agree fully (the official rule)."""
    union = pred | gold
    return len(pred & gold) / len(union) if union else 1.0


def _verdict(score: float, prediction: str) -> Verdict:
    return Verdict(score >= 1.0, float(score), True, prediction, "rule")


def _unparsed(detail: str) -> Verdict:
    return Verdict(False, 0.0, False, None, "rule", detail)


def _ocr(response: str, item: TIRItem) -> Verdict:
    found = ocr_gold(item) in response
    return _verdict(float(found), extract_answer(response) or response.strip()[-200:])


def _jigsaw(response: str, answer: str, item: TIRItem) -> Verdict:
    if item.jigsaw_size is None:
        raise ValueError(
            f"TIR-Bench jigsaw item needs meta_data.difficulty (the grid size n); gold "
            f"{item.gold!r} has none: fix the loader or the local copy"
        )
    gold = jigsaw_order(item.gold, item.jigsaw_size)
    if gold is None:
        raise ValueError(f"TIR-Bench jigsaw gold {item.gold!r} is not {item.jigsaw_size}² numbers")
    pred = jigsaw_order(answer, item.jigsaw_size)
    if pred is None:
        pred = jigsaw_order(response, item.jigsaw_size, last=True)
    if pred is None:
        return _unparsed(f"no run of {item.jigsaw_size**2} numbers in the answer")
    return _verdict(position_accuracy(pred, gold), answer)


def _spot_difference(answer: str, gold: str) -> Verdict:
    pred = {int(n) for n in _INTEGER.findall(answer)}
    if not pred:
        return _unparsed("no patch numbers in the answer")
    return _verdict(set_iou(pred, {int(n) for n in _INTEGER.findall(gold)}), answer)


def _pair(answer: str, gold: str) -> Verdict:
    wanted = _PAIR.search(gold)
    found = _read_pair(answer)
    if found is None:
        return _unparsed("no 'row, column' pair in the answer")
    same = wanted is not None and found == tuple(int(n) for n in wanted.groups())
    return _verdict(float(same), answer)


def _read_pair(answer: str) -> tuple[int, int] | None:
    """The answer's two integers ("row 3, column 5"), else its first "a, b" pair."""
    numbers = [int(n) for n in _INTEGER.findall(answer)]
    if len(numbers) == 2:
        return numbers[0], numbers[1]
    found = _PAIR.search(answer)
    return None if found is None else (int(found.group(1)), int(found.group(2)))


def _by_gold_form(response: str, answer: str, item: TIRItem) -> Verdict:
    gold = item.gold.strip()
    if gold.isalpha() and gold.isupper() and len(gold) == 1:
        return _single_letter(response, gold, item.options)
    if gold.isalpha() and gold.isupper() and set(gold) <= set(_LETTERS):
        return _letters(answer, gold)
    if parse_number(gold) is not None and _is_number(gold):
        return _number(answer, gold)
    return _verdict(float(normalize_text(answer) == normalize_text(gold)), answer)


def _single_letter(response: str, gold: str, options: Mapping[str, str] | None) -> Verdict:
    choices = dict(options) if options and gold in options else dict.fromkeys(_LETTERS, "")
    pred = extract_choice(response, choices)
    if pred is None:
        return _unparsed("no option letter could be read")
    return _verdict(float(pred == gold), pred)


def _letters(answer: str, gold: str) -> Verdict:
    match = _MULTI_LETTER.fullmatch(answer.strip().rstrip("."))
    if match is None:
        return _unparsed("the answer is not a set of option letters")
    letters = "".join(sorted(re.findall(r"[A-J]", answer)))
    return _verdict(float(letters == "".join(sorted(gold))), letters)


def _is_number(gold: str) -> bool:
    try:
        float(gold)
    except ValueError:
        return False
    return True


def _number(answer: str, gold: str) -> Verdict:
    if parse_number(answer) is None:
        return _unparsed("no number in the answer")
    same = check_number(answer, gold) or bool(check_math(answer, gold))
    return _verdict(float(same), answer)
