"""Map a response to one option letter of a multiple-choice item, or to None.

Where to read (the first that exists decides; see `beacon.verify.extract`):

1. the last `<answer>` span — when it exists, nothing outside it is read;
2. the last `\\boxed{}`, if it names an option;
3. the tails of the strong answer markers ("answer is", "Answer:", "final answer",
   "correct option is"), last first: the last explicit answer wins over earlier ones, and a
   tail starting with "not" ("the answer is not A") is skipped;
4. a first line that is nothing but a letter form ("B" then an explanation: the format of
   models told to answer with the letter directly);
5. the last non-empty line.

How one span is read (`read_span`, first rule that gives a letter wins):

a. the whole span is a letter form: `B`, `(B)`, `B.`, `B)`, `[B]`, `**B**`, `Option B`, `b`.
   A letter that is not an option key makes the span unreadable (never another letter);
b. a `\\boxed{}` inside the span, then the span's own strong markers, last first;
   then a contrast between two letters, read as the chosen one: "B rather than C", "B instead
   of C", "B, not C", "B and not C", "not C but B" (a chosen letter that is no option key, or
   contrasts that choose different letters, make the span unreadable);
c. a leading label: `B. text`, `(B) text`, `B) text`, `b) text`, `B: text`, `B, because`;
d. the option's text: normalized equality (case decides only between options that differ
   only in case), then containment. Overlapping matches keep the
   longest ("quarter past" beats "quarter"); matches of different options that do not
   overlap contradict each other, unless one starts the span ("No, ..." → "No");
e. numbers: when every option is a number ("145°", "6cm") and the span holds exactly one
   number, the option with that value;
f. weak cues "option X", "choice X", "choose/pick/select X", when they name one letter only;
g. in a short span (at most 8 words) exactly one distinct standalone capital letter that is an
   option. "A" and "I" followed by a lower-case word are read as the article and the pronoun
   ("A cat", "I think"), except before words like "is", "because" ("A is correct").

Anything else is None: the caller records the item as unparsed, never as a guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from beacon.verify.extract import (
    answer_span,
    boxed_contents,
    clean_response,
    first_line,
    last_line,
    marker_tails,
    tidy,
)
from beacon.verify.numbers import is_plain_number, parse_number, parse_numbers
from beacon.verify.text import normalize_text

_SHORT_SPAN_WORDS = 8
_LETTER_ONLY = re.compile(r"(?i:option|choice)?\s*[\(\[]?\s*([A-Za-z])\s*[\)\]]?\s*[.:)]?", re.S)
_LABEL = re.compile(
    r"[\(\[]\s*([A-Za-z])\s*[\)\]]"  # (B) text, [b] text
    r"|([A-Z])\s*[.:),，](?!\d)"  # B. text, B: text, B) text, B, because
    r"|([a-z])\)"  # b) text (ChartQA-Pro writes its options so)
    r"|(?i:option)\s+([A-Z])\b"  # Option B is ...
)
_WEAK_CUE = re.compile(
    r"\b(?i:option|choice|choose|chose|pick|select|selected)\b\s*:?\s*"
    r"[\(\[]?([A-Za-z])[\)\]]?(?![\w'’])"
)
_LETTER_WORD = r"(?:(?i:option|choice)\s+)?[\(\[]?([A-Z])[\)\]]?"
# "B rather than C", "B instead of C", "B, not C", "B and not C" (the chosen letter first) and
# "not C but B", "not C, but rather B" (the chosen letter last). The letters must stand alone, so
# "A cat rather than B" is no contrast between letters.
_CONTRAST = re.compile(
    rf"(?<![\w'’]){_LETTER_WORD}\s*(?:,\s*|\s)(?:rather\s+than|instead\s+of|(?:and\s+|but\s+)?not)"
    rf"\s+{_LETTER_WORD}(?![\w'’])"
    rf"|(?<![\w'’])(?i:not)\s+{_LETTER_WORD}\s*,?\s+(?i:but)\s+(?:(?i:rather)\s+)?{_LETTER_WORD}"
    r"(?![\w'’])"
)
_STANDALONE = re.compile(r"(?<![\w'’.\-/&])([A-Z])(?![\w'’\-/&]|\.\w)")
_NEXT_WORD = re.compile(r"\s+([a-z]+)")
_LETTER_A_FOLLOWERS = {
    "is", "because", "since", "as", "seems", "appears", "matches", "fits", "and", "or",
    "here", "but", "not", "only",
}  # fmt: skip
_LETTER_I_FOLLOWERS = {"is"}


def extract_choice(response: str, options: Mapping[str, str]) -> str | None:
    """The option key the response chooses, or None when it cannot be read without guessing.

    `options` maps keys ("A", "B", ...) to option texts; the returned key is always one of
    them, spelled as given. See the module docstring for the reading and tie rules.
    """
    keys = {str(k).strip().upper(): k for k in options}
    texts = {keys[str(k).strip().upper()]: str(v) for k, v in options.items()}
    text = clean_response(response)
    span = answer_span(text)
    if span is not None:
        return read_span(span, keys, texts)
    found = _by_inner_markers(text, keys, texts)
    if found is not None:
        return found
    first = first_line(text)
    letter = None if first is None else _LETTER_ONLY.fullmatch(tidy(first) or "")
    if letter:
        return keys.get(letter.group(1).upper())
    line = last_line(text)
    return None if line is None else read_span(line, keys, texts)


def read_span(span: str, keys: Mapping[str, str], texts: Mapping[str, str]) -> str | None:
    """The option a short piece of text names (rules a-g of the module docstring)."""
    text = tidy(span.replace("**", "").replace("__", ""))
    if text is None:
        return None
    letter = _LETTER_ONLY.fullmatch(text)
    if letter:
        return keys.get(letter.group(1).upper())
    found = _by_inner_markers(text, keys, texts)
    if found is not None:
        return found
    chosen = _contrast_choices(text)
    if chosen:  # a chosen letter that is no option, or two different ones: unreadable
        return keys.get(chosen.pop()) if len(chosen) == 1 else None
    for rule in (_by_label, _by_text, _by_number, _by_weak_cue, _by_letter):
        found = rule(text, keys, texts)
        if found is not None:
            return found
    return None


def _negated(tail: str) -> bool:
    return bool(re.match(r"(?i)\s*not\b", tail))


def _by_inner_markers(text: str, keys: Mapping[str, str], texts: Mapping[str, str]) -> str | None:
    """The last \\boxed{} that names an option, else the last un-negated "answer is" tail.

    A tail is always shorter than `text` (the marker is not part of it), so reading it cannot
    recurse on the same text.
    """
    boxed = boxed_contents(text)
    if boxed:
        found = read_span(boxed[-1], keys, texts)
        if found is not None:
            return found
    for tail in reversed(marker_tails(text)):
        if tail and tail != text and not _negated(tail):
            found = read_span(tail, keys, texts)
            if found is not None:
                return found
    return None


def _contrast_choices(text: str) -> set[str]:
    """The letters chosen in the span's "B rather than C" / "not C but B" forms (none: no such
    form). The rejected letter is never read, so it cannot win rule g's lone-letter count."""
    chosen = set()
    for match in _CONTRAST.finditer(text):
        first, _, _, last = match.groups()
        chosen.add(first if first is not None else last)
    return chosen


def _by_label(text: str, keys: Mapping[str, str], texts: Mapping[str, str]) -> str | None:
    match = _LABEL.match(text)
    if match:
        letter = next(g for g in match.groups() if g)
        return keys.get(letter.upper())
    first, _, rest = text.partition(" ")
    key = keys.get(first) if len(first) == 1 else None
    if key is not None and rest and normalize_text(rest) == normalize_text(texts[key]):
        return key
    return None


def _by_text(text: str, keys: Mapping[str, str], texts: Mapping[str, str]) -> str | None:
    span = normalize_text(text)
    normalized = {key: normalize_text(value) for key, value in texts.items()}
    exact = [key for key, value in normalized.items() if value and value == span]
    if len(exact) > 1:  # options equal up to case ("XAXa", "XAXA"): compare with case
        cased = normalize_text(text, lower=False)
        exact = [key for key in exact if normalize_text(texts[key], lower=False) == cased]
    if exact:
        return exact[0] if len(exact) == 1 else None
    matches = []  # (start, end, key)
    for key, value in normalized.items():
        if value:
            pattern = r"(?<!\w)" + re.escape(value) + r"(?!\w)"
            matches += [(m.start(), m.end(), key) for m in re.finditer(pattern, span)]
    kept = [m for m in matches if not any(_inside(m, other) for other in matches)]
    chosen = {key for _, _, key in kept}
    if len(chosen) == 1:
        return chosen.pop()
    leading = {key for start, _, key in kept if start == 0}
    return leading.pop() if len(leading) == 1 else None


def _inside(inner: tuple[int, int, str], outer: tuple[int, int, str]) -> bool:
    """True when `inner` lies within a longer match of another option."""
    return (
        inner[2] != outer[2]
        and outer[0] <= inner[0]
        and inner[1] <= outer[1]
        and outer[1] - outer[0] > inner[1] - inner[0]
    )


def _by_number(text: str, keys: Mapping[str, str], texts: Mapping[str, str]) -> str | None:
    if not texts or not all(is_plain_number(normalize_text(v)) for v in texts.values()):
        return None
    numbers = parse_numbers(text)
    if len(numbers) != 1:
        return None
    hits = []
    for key, value in texts.items():
        option = parse_number(value)
        if option is not None and abs(option.value - numbers[0].value) <= 1e-9 * max(
            1.0, abs(option.value)
        ):
            hits.append(key)
    return hits[0] if len(hits) == 1 else None


def _by_weak_cue(text: str, keys: Mapping[str, str], texts: Mapping[str, str]) -> str | None:
    letters = {m.group(1).upper() for m in _WEAK_CUE.finditer(text)}
    return keys.get(letters.pop()) if len(letters) == 1 else None


def _by_letter(text: str, keys: Mapping[str, str], texts: Mapping[str, str]) -> str | None:
    if len(text.split()) > _SHORT_SPAN_WORDS:
        return None
    letters = set()
    for match in _STANDALONE.finditer(text):
        letter = match.group(1)
        if letter in keys and not _article_or_pronoun(letter, text[match.end() :]):
            letters.add(letter)
    return keys[letters.pop()] if len(letters) == 1 else None


def _article_or_pronoun(letter: str, after: str) -> bool:
    """True for "A cat" / "I think": the capital is a word, not an option letter."""
    if letter not in {"A", "I"}:
        return False
    word = _NEXT_WORD.match(after)
    if word is None:
        return False
    allowed = _LETTER_A_FOLLOWERS if letter == "A" else _LETTER_I_FOLLOWERS
    return word.group(1) not in allowed
