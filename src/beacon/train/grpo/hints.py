"""HGCE hints (beacon.md §4, steps 1-2): where an all-wrong group's answer-free hint comes from.

`HintSource` gives the item's cached answer-free hint from the data pipeline's JSONL (`{benchmark,
sample_id, hint}` rows, with `accepted` where `beacon data hints` wrote them); items without one can
fall back to a scripted hint: the benchmark's own (`metadata["hint"]`, e.g. `synth_demo`'s search
items) or, for `synth`, `synth_region_hint` built from the item's metadata region. The recipe checks
every hint with `beacon.train.grpo.hints.check_hint` before it is shown.

`beacon data hints` writes a row for every item, the ones it refused (every attempt leaked or
failed) as `"hint": null, "accepted": false`. Such a row is no hint: it is never shown (the
text "None" would pass the leak check), and the source remembers it so that the recipe counts
the item as refused (`rl/hint_refused`) rather than missing (`rl/hint_missing`).

What is not covered: generating missing hints through the expert (the data pipeline's job);
without a cached or scripted hint an all-wrong group is simply not rescued (counted).

HGCE: Hint-Guided Capability Expansion: which groups get a hint, and which hinted groups train.

Paper §3 "Hint-Guided Capability Expansion" (beacon.md §4):

1. a group whose responses are **all wrong** gets a hint (`needs_hint`);
2. the hint is the item's cached answer-free hint (data pipeline), checked by `hint_leaks`;
3. a new group is sampled with the hint appended to the question (agent mode "hinted");
4. the hinted group trains with the hint removed from the input (`beacon.train.core.encode`), if it
   passes the same group filter as any other group; such a group is "rescued".

The trainer owns steps 2-3 (expert calls, sampling); this module holds the rules.

Hints: HGCE's answer-free hint check (paper §3 "Hint-Guided Capability Expansion", beacon.md §4 step
2).

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

import logging
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from beacon.jsonl import read_jsonl
from beacon.train.core.outcomes import GroupOutcomes
from beacon.train.grpo.config import FilterRule
from beacon.train.grpo.group_scoring import drop_reason
from beacon.types import Sample

logger = logging.getLogger(__name__)

Key = tuple[str, str]  # (benchmark, sample_id)


@dataclass(frozen=True)
class CachedHints:
    """A hint file's usable hints, and the items whose hint the data pipeline refused."""

    accepted: dict[Key, str] = field(default_factory=dict)
    refused: frozenset[Key] = frozenset()


class HintSource:
    """The item's cached hint, else (when enabled) a scripted one: the benchmark's own
    answer-free `metadata["hint"]` (`synth_demo`), or for `synth` the region hint."""

    def __init__(self, path: str | None, synth_region_hints: bool) -> None:
        cached = read_hints(Path(path)) if path else CachedHints()
        self.cache = cached.accepted
        self.refused = cached.refused
        self.synth_region_hints = synth_region_hints
        if path:
            logger.info(
                "rollout.hints %s: %d accepted hints; %d items refused by the data pipeline "
                "(never shown, counted in rl/hint_refused when their group needs a hint)",
                path,
                len(self.cache),
                len(self.refused),
            )

    def hint(self, sample: Sample) -> str | None:
        cached = self.cache.get((sample.benchmark, sample.id))
        if cached is not None:
            return cached
        if not self.synth_region_hints:
            return None
        if isinstance(sample.metadata.get("hint"), str):
            return sample.metadata["hint"]
        return synth_region_hint(sample) if sample.benchmark == "synth" else None

    def was_refused(self, sample: Sample) -> bool:
        """True when the hint file holds a refused row (and no accepted one) for the item."""
        return (sample.benchmark, sample.id) in self.refused


def read_hints(path: Path) -> CachedHints:
    """The data pipeline's JSONL: accepted hints by (benchmark, sample_id), and refused items.

    A row is refused when `accepted` is false or its hint is null or blank; a row without
    `accepted` (a hand-written `{benchmark, sample_id, hint}`) is accepted when it has a hint.
    A later row for the same item replaces an earlier one.
    """
    hints: dict[Key, str | None] = {}
    for n, row in enumerate(read_jsonl(path), 1):
        if not isinstance(row, dict) or not {"benchmark", "sample_id", "hint"} <= row.keys():
            raise ValueError(
                f"{path}: record {n} needs benchmark, sample_id and hint keys; fix the file or "
                "unset rollout.hints"
            )
        hint, accepted = row["hint"], row.get("accepted", True)
        if not (hint is None or isinstance(hint, str)) or not isinstance(accepted, bool):
            raise ValueError(
                f"{path}: record {n} has hint {hint!r} and accepted {accepted!r}; a hint is "
                "text or null and accepted true or false (as `beacon data hints` writes them); "
                "fix the file or unset rollout.hints"
            )
        usable = accepted and hint is not None and hint.strip() != ""
        hints[(str(row["benchmark"]), str(row["sample_id"]))] = hint if usable else None
    return CachedHints(
        accepted={key: hint for key, hint in hints.items() if hint is not None},
        refused=frozenset(key for key, hint in hints.items() if hint is None),
    )


def synth_region_hint(sample: Sample) -> str | None:
    """A scripted, answer-free HGCE hint for a synth item: where the evidence is, and to zoom.

    Built from `metadata["region"]` (pixels of the full image) alone; it names no value of the
    answer, and the recipe still runs `check_hint` on it (a coordinate can coincide with a
    numeric answer, and such a hint is then refused).
    """
    region = sample.metadata.get("region")
    if not region or len(region) != 4:
        return None
    x0, y0, x1, y1 = (int(v) for v in region)
    return (
        f"The evidence is inside the box ({x0}, {y0}, {x1}, {y1}) of the image (pixels). Crop "
        "that region with a margin, enlarge it, and read it before answering."
    )


def needs_hint(group: GroupOutcomes) -> bool:
    """HGCE's trigger: every response of the (un-hinted) group is wrong (paper §3)."""
    return not group.hinted and group.all_wrong


@dataclass(frozen=True)
class HintCheck:
    """Whether a hint may be shown to the policy, and why not (for the step log)."""

    ok: bool
    problems: list[str] = field(default_factory=list)


def check_hint(
    hint: str | None, answer: str, options: Mapping[str, str] | None = None
) -> HintCheck:
    """A hint is usable when it is non-empty and answer-free (`hint_leaks`, beacon.md §4 step 2)."""
    if hint is None or not hint.strip():
        return HintCheck(False, ["no hint cached for this item"])
    problems = leak_reasons(hint, answer, options)
    return HintCheck(not problems, problems)


def rescued(group: GroupOutcomes, rewards: Sequence[float], rule: FilterRule = "adaptive") -> bool:
    """A hinted group is rescued when the group filter keeps it (it carries a learning signal)."""
    return group.hinted and drop_reason(group, rewards, rule) is None


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
