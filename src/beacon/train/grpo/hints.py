"""HGCE hints (beacon.md §4, steps 1-2): where an all-wrong group's answer-free hint comes from.

`HintSource` gives the item's cached answer-free hint from the data pipeline's JSONL
(`{benchmark, sample_id, hint}` rows); items without one can fall back to a scripted hint: the
benchmark's own (`metadata["hint"]`, e.g. `synth_demo`'s search items) or, for `synth`,
`synth_region_hint` built from the item's metadata region. The recipe checks every hint with
`beacon.rl.check_hint` before it is shown.

What is not covered: generating missing hints through the expert (the data pipeline's job);
without a cached or scripted hint an all-wrong group is simply not rescued (counted).
"""

from __future__ import annotations

from pathlib import Path

from beacon.jsonl import read_jsonl
from beacon.types import Sample


class HintSource:
    """The item's cached hint, else (when enabled) a scripted one: the benchmark's own
    answer-free `metadata["hint"]` (`synth_demo`), or for `synth` the region hint."""

    def __init__(self, path: str | None, synth_region_hints: bool) -> None:
        self.cache = read_hints(Path(path)) if path else {}
        self.synth_region_hints = synth_region_hints

    def hint(self, sample: Sample) -> str | None:
        cached = self.cache.get((sample.benchmark, sample.id))
        if cached is not None:
            return cached
        if not self.synth_region_hints:
            return None
        if isinstance(sample.metadata.get("hint"), str):
            return sample.metadata["hint"]
        return synth_region_hint(sample) if sample.benchmark == "synth" else None


def read_hints(path: Path) -> dict[tuple[str, str], str]:
    """(benchmark, sample_id) -> hint from the data pipeline's JSONL."""
    out: dict[tuple[str, str], str] = {}
    for n, row in enumerate(read_jsonl(path), 1):
        if not isinstance(row, dict) or not {"benchmark", "sample_id", "hint"} <= row.keys():
            raise ValueError(
                f"{path}: record {n} needs benchmark, sample_id and hint keys; fix the file or "
                "unset rollout.hints"
            )
        out[(str(row["benchmark"]), str(row["sample_id"]))] = str(row["hint"])
    return out


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
