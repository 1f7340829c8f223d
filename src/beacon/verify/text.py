"""Text answers: normalization, exact match, yes/no labels and ANLS.

`normalize_text` is the usual open-VQA normalization: lower case, Unicode minus to "-",
degree marks unified ("^\\circ", "\\circ", "degrees" → "°"), "$" dropped,
punctuation removed (but "0.57" and "1,234" keep their separators), the articles a/an/the
dropped, whitespace collapsed.

ANLS (Biten et al., "Scene Text Visual Question Answering", 2019) scores a prediction against
several accepted answers: s = max_g (1 - NL(pred, g)) if NL < threshold else 0, where NL is the
Levenshtein distance divided by the longer string's length, on lower-cased, stripped strings.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
# Punctuation, except a point or comma between two digits ("0.57", "1,234") and a minus sign.
_PUNCT = re.compile(r"(?!(?<=\d)[.,](?=\d))(?!-(?=\d))[^\w\s°%]")
_DEGREE = re.compile(r"\s*(?:\^\s*(?:\{\s*\\circ\s*\}|\\circ)|\\circ|\\degree|\bdegrees?\b|°)\s*")
_YES = {"yes", "true"}
_NO = {"no", "false"}


def normalize_text(text: str, *, lower: bool = True) -> str:
    """Lower-cased text without punctuation, articles or repeated whitespace.

    `lower=False` keeps the case, to tell apart options that differ only in it ("XAXa", "XAXA").
    """
    text = _DEGREE.sub("° ", text.replace("$", "")).replace("−", "-").replace("’", "'")
    text = text.lower() if lower else text
    text = _PUNCT.sub(" ", text)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(pred: str, golds: str | Sequence[str]) -> bool:
    """True when the normalized prediction equals any normalized gold."""
    candidates = [golds] if isinstance(golds, str) else list(golds)
    target = normalize_text(pred)
    return any(target == normalize_text(g) for g in candidates)


def yesno_label(text: str, *, digits: bool = False) -> str | None:
    """ "yes", "no" or None for a text that gives no single answer.

    The first word decides ("No, the two circles are the same size" is "no"); otherwise the
    text must contain exactly one of the two labels as a word. "true"/"false" count as
    yes/no (ChartQA-Pro fact checking). `digits=True` also reads "1"/"0", the way
    HallusionBench stores its gold (`gt_answer`); predictions are never read that way.
    """
    words = re.findall(r"[a-z0-9]+", text.lower())
    if not words:
        return None
    if digits and words[0] in {"1", "0"} and len(words) == 1:
        return "yes" if words[0] == "1" else "no"
    if words[0] in _YES or words[0] in _NO:
        return "yes" if words[0] in _YES else "no"
    has_yes, has_no = "yes" in words, "no" in words
    if has_yes != has_no:
        return "yes" if has_yes else "no"
    return None


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insertions, deletions, substitutions all cost 1), O(len(a)·len(b))."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def anls(pred: str, golds: str | Sequence[str], threshold: float = 0.5) -> float:
    """Average Normalized Levenshtein Similarity of one prediction, in [0, 1] (see above)."""
    candidates = [golds] if isinstance(golds, str) else list(golds)
    p = " ".join(pred.lower().split())
    best = 0.0
    for gold in candidates:
        g = " ".join(gold.lower().split())
        longest = max(len(p), len(g))
        distance = levenshtein(p, g) / longest if longest else 0.0
        if distance < threshold:
            best = max(best, 1.0 - distance)
    return best
