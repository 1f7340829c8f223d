"""List answers ("[2007, 2008]", "['Mars', 'Galaxy']", "3, 5 and 7"), compared item by item.

Items are split on commas followed by a space, semicolons and " and "; a list written without
spaces ("[1,2,3]") is split on every comma. "1,234" alone stays one number. Numeric items are
compared with `check_number` under the same tolerance as the benchmark's numbers; other items
by normalized text. Order matters unless the sample says `list_order: false`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from beacon.verify.numbers import is_plain_number
from beacon.verify.text import normalize_text

_SEPARATORS = re.compile(r",\s+|;\s*|\s+and\s+")
_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")


def looks_like_list(text: str) -> bool:
    """True for a bracketed list with at least one separator: "[2007, 2008]"."""
    stripped = text.strip()
    return stripped.startswith("[") and stripped.endswith("]") and "," in stripped


def split_list(text: str) -> list[str]:
    """The items of a written list, stripped of brackets and quotes; [] for empty text."""
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    items = _SEPARATORS.split(body)
    if len(items) == 1 and "," in body and not _THOUSANDS.match(body.strip()):
        items = body.split(",")
    cleaned = [item.strip().strip("'\"").strip() for item in items]
    return [item for item in cleaned if item]


def items_equal(pred: str, gold: str, numbers_equal: Callable[[str, str], bool]) -> bool:
    if is_plain_number(gold) and is_plain_number(pred):
        return numbers_equal(pred, gold)
    return normalize_text(pred) == normalize_text(gold)


def lists_match(
    pred: list[str],
    gold: list[str],
    numbers_equal: Callable[[str, str], bool],
    *,
    ordered: bool = True,
) -> bool:
    """True when both lists have the same items (in the same order when `ordered`)."""
    if len(pred) != len(gold):
        return False
    if ordered:
        return all(items_equal(p, g, numbers_equal) for p, g in zip(pred, gold, strict=True))
    remaining = list(pred)
    for g in gold:
        hit = next((p for p in remaining if items_equal(p, g, numbers_equal)), None)
        if hit is None:
            return False
        remaining.remove(hit)
    return True
