"""HGCE hints (beacon.md §4, steps 1-2): where an all-wrong group's answer-free hint comes from.

`HintSource` gives the item's cached answer-free hint from the data pipeline's JSONL
(`{benchmark, sample_id, hint}` rows, with `accepted` where `beacon data hints` wrote them);
items without one can fall back to a scripted hint: the benchmark's own (`metadata["hint"]`,
e.g. `synth_demo`'s search items) or, for `synth`, `synth_region_hint` built from the item's
metadata region. The recipe checks every hint with `beacon.rl.check_hint` before it is shown.

`beacon data hints` writes a row for every item, the ones it refused (every attempt leaked or
failed) as `"hint": null, "accepted": false`. Such a row is no hint: it is never shown (the
text "None" would pass the leak check), and the source remembers it so that the recipe counts
the item as refused (`rl/hint_refused`) rather than missing (`rl/hint_missing`).

What is not covered: generating missing hints through the expert (the data pipeline's job);
without a cached or scripted hint an all-wrong group is simply not rescued (counted).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from beacon.jsonl import read_jsonl
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
