"""Multiple-choice options: building, parsing from question text, laying out, shuffling.

Several benchmarks embed their options in the question string, each in its own style:
MathVista / MMStar's MathVista rows write "Choices:\\n(A) 40.7\\n(B) 74", MathVerse writes
"Choices:\\nA:40°\\nB:60°", MMStar writes "Options: A: red, B: blue", ChartQA-Pro writes
"a) 10\\nb) 20", TreeBench writes "A. cat\\nB. dog". `split_options` reads all of them.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Mapping, Sequence

from beacon.types import Sample

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

_LINE_OPTION = re.compile(r"^\s*\(?([A-Za-z])\s*[\).:：]\s*(.*\S)?\s*$")
_INLINE_OPTION = re.compile(r"(?:^|,\s*)([A-Z]):\s")
_HEADER = re.compile(r"\n?\s*(?:Choices|Options)\s*[:：]?\s*$", re.IGNORECASE)


def options_from_list(choices: Sequence[str]) -> dict[str, str]:
    """{"A": choices[0], "B": choices[1], ...}."""
    if len(choices) > len(LETTERS):
        raise ValueError(f"{len(choices)} options is more than the {len(LETTERS)} letters A-Z")
    return {LETTERS[i]: str(text) for i, text in enumerate(choices)}


def format_options(options: Mapping[str, str]) -> str:
    """One option per line, "A. text", the layout most VLM instruction data uses."""
    return "\n".join(f"{letter}. {text}" for letter, text in options.items())


def split_options(text: str) -> tuple[str, dict[str, str] | None]:
    """Split a question with embedded options into (stem, options); options None if none.

    Options are accepted only as a run of consecutive letters from A (at least two), so a
    sentence that happens to start with "A." is not mistaken for an option list.
    """
    by_line = _split_line_options(text)
    if by_line is not None:
        return by_line
    return _split_inline_options(text)


def _split_line_options(text: str) -> tuple[str, dict[str, str]] | None:
    lines = text.split("\n")
    for start, line in enumerate(lines):
        match = _LINE_OPTION.match(line)
        if not match or match.group(1).upper() != "A":
            continue
        options: dict[str, str] = {}
        for follow in lines[start:]:
            found = _LINE_OPTION.match(follow)
            expected = LETTERS[len(options)]
            if not found or found.group(1).upper() != expected:
                break
            options[expected] = (found.group(2) or "").strip()
        if len(options) >= 2 and start + len(options) == len(lines):
            stem = _HEADER.sub("", "\n".join(lines[:start])).strip()
            return stem, options
    return None


def _split_inline_options(text: str) -> tuple[str, dict[str, str] | None]:
    marker = re.search(r"(?:Choices|Options)\s*[:：]\s*", text, re.IGNORECASE)
    if not marker:
        return text.strip(), None
    body = text[marker.end() :]
    parts = _INLINE_OPTION.split(body)
    # parts = [before, "A", text, "B", text, ...]
    letters, texts = parts[1::2], parts[2::2]
    if len(letters) < 2 or "".join(letters) != LETTERS[: len(letters)] or parts[0].strip():
        return text.strip(), None
    options = {letter: value.strip() for letter, value in zip(letters, texts, strict=True)}
    return text[: marker.start()].strip(), options


def option_letter(options: Mapping[str, str], text: str) -> str | None:
    """The letter whose option text equals `text` (exact, then whitespace/case-insensitive)."""
    for letter, value in options.items():
        if value == text:
            return letter
    wanted = " ".join(text.split()).casefold()
    for letter, value in options.items():
        if " ".join(value.split()).casefold() == wanted:
            return letter
    return None


def shuffle_options(sample: Sample, seed: int) -> Sample:
    """A copy of `sample` with its options in a seeded random order and the gold relabelled.

    The permutation depends only on (seed, sample.id), so it is stable across runs and
    processes. `metadata["option_permutation"]` lists, for each new letter in order, the
    original letter now shown there; `metadata["original_answer"]` keeps the published gold.
    """
    if not sample.options:
        return sample
    original = list(sample.options)
    order = original[:]
    random.Random(f"beacon-options:{seed}:{sample.id}").shuffle(order)
    options = {LETTERS[i]: sample.options[old] for i, old in enumerate(order)}
    metadata = dict(sample.metadata)
    metadata["option_permutation"] = order
    metadata["original_answer"] = sample.answer
    answer = LETTERS[order.index(sample.answer)] if sample.answer in order else sample.answer
    return dataclasses.replace(sample, options=options, answer=answer, metadata=metadata)
