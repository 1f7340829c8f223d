"""VisualProbe easy / medium / hard (Mini-o3): find and read small things in large images.

No real row could be inspected here. From a third-party builder that downloads the pinned
snapshots: each of `Mini-o3/VisualProbe_Easy`, `_Medium`, `_Hard` (141 / 268 / 106 rows) is a
repo of files, `val.json` at its root (a list of records with `doc_id`, `images` (a list,
sometimes written as a Python-list string), `problem` (the question, prefixed with "<image>"),
`solution` (a short free-form answer) and `data_source`) and the images in `data/`. The image
paths are written relative to the folder *above* the repo ("VisualProbe_Easy/data/1.jpg"), so
they are resolved against the repo folder with leading folders dropped until a file exists
(`tables.resolve_relative`). The hub branch downloads the repo snapshot. Local layout: the
repo folder or its val.json.

The split name gives `difficulty` by construction; answers are short text, compared by the
verifier's text rules (an LLM judge is the benchmark's own scorer for paraphrases).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

from beacon.benchmarks.base import Benchmark, Row, register
from beacon.benchmarks.tables import (
    literal_list,
    read_table,
    resolve_relative,
    table_in,
    text,
    with_fields,
)
from beacon.types import Sample


class VisualProbe(Benchmark):
    difficulty: ClassVar[str] = ""
    revision = "main"
    split = "validation"
    categories = ("visualprobe",)

    def read_hub(self) -> Iterable[Row]:
        return self.read_snapshot()

    def read_local(self, path: Path) -> Iterable[Row]:
        file = table_in(path, ["val.json"])
        return with_fields(read_table(file), _base=file.parent)

    def to_sample(self, row: Row) -> Sample:
        question = text(row["problem"]).removeprefix("<image>").strip()
        return Sample(
            id=f"{self.difficulty}_{text(row.get('doc_id')) or row['_row']}",
            images=_images(row),
            question=question,
            answer=text(row["solution"]),
            answer_type="text",
            metadata={
                "category": "visualprobe",
                "difficulty": self.difficulty,
                "data_source": text(row.get("data_source")) or None,
            },
        )


def _images(row: Row) -> list[Path]:
    base = Path(row["_base"])
    return [resolve_relative(name, [base, base.parent]) for name in _paths(row.get("images"))]


def _paths(value: Any) -> list[str]:
    if isinstance(value, str):
        parsed = literal_list(value)
        return [value] if parsed is None else [str(p) for p in parsed]
    return [str(p) for p in value or []]


@register
class VisualProbeEasy(VisualProbe):
    name = "visualprobe_easy"
    description = "VisualProbe easy: small-object questions in high-resolution images."
    hub = "Mini-o3/VisualProbe_Easy"
    revision = "0e665a57946d4473deb9975a13f8ddba973b8026"
    difficulty = "easy"


@register
class VisualProbeMedium(VisualProbe):
    name = "visualprobe_medium"
    description = "VisualProbe medium: small-object questions in high-resolution images."
    hub = "Mini-o3/VisualProbe_Medium"
    revision = "25d5ff5bce48147be34fd2655617ab17dc55b3fa"
    difficulty = "medium"


@register
class VisualProbeHard(VisualProbe):
    name = "visualprobe_hard"
    description = "VisualProbe hard: tiny objects in cluttered high-resolution images."
    hub = "Mini-o3/VisualProbe_Hard"
    revision = "bbe9b7a6c41d49844f45e51916ec0a60d1f0e378"
    difficulty = "hard"
