"""MathVerse testmini, vision-only version (788 items): the whole problem is in the image.

Confirmed against real rows (`ZrrSkywalker/MathVerse` testmini_text_only.json and the output
template): a JSON list with `sample_index`, `problem_index`, `problem_version`, `question`,
`image`, `answer` (a letter for multi-choice, a value for free-form), `question_type`
(`multi-choice` / `free-form`), `metadata`, `query_wo`, `query_cot`. The hub (AI4Math/MathVerse,
config and split `testmini`, revision pinned from a third-party manifest, unverified here) holds
all six versions with an `image` column; this benchmark keeps `problem_version == "Vision Only"`.
Local layout: `testmini.json` with the image folders (`images_version_6/...`) beside it.

Vision-only multi-choice items print their options inside the image, so `options` is None and
the gold is a bare letter with `answer_type="math"`, which the verifier scores by reading an
option letter only (its bare-letter rule). Free-form golds are `answer_type="math"` too, numbers
included: math-verify rounds the prediction to the gold's decimals, so "11.79" is right for a
gold of "11.8" and "11.8" wrong for a gold of "11.79" (the gold's precision decides, as the
benchmark states its answers), and "\\sqrt{3}" can match "1.732".
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from beacon.benchmarks.base import Benchmark, Row, register
from beacon.benchmarks.tables import image_source, read_table, table_in, text, with_fields
from beacon.types import Sample

VISION_ONLY = "Vision Only"


@register
class MathVerseVisionOnly(Benchmark):
    name = "mathverse"
    description = "MathVerse testmini, vision-only: diagrams whose question is drawn in the image."
    hub = "AI4Math/MathVerse"
    hub_config = "testmini"
    revision = "3bc86196678bad115a923d2851c6821dbe235939"
    split = "testmini"
    categories = ("Plane Geometry", "Solid Geometry", "Functions")

    def read_local(self, path: Path) -> Iterable[Row]:
        file = table_in(path, ["testmini.json"])
        return with_fields(read_table(file), _base=file.parent)

    def to_sample(self, row: Row) -> Sample | None:
        if text(row.get("problem_version")) != VISION_ONLY:
            return None
        meta = dict(row.get("metadata") or {})
        image = image_source(row.get("image"), row.get("_base"))
        answer = text(row["answer"])
        multi_choice = text(row.get("question_type")) == "multi-choice"
        metadata = {
            "category": meta.get("subject"),
            "subfield": meta.get("subfield"),
            "source": meta.get("source"),
            "problem_index": text(row.get("problem_index")),
            "question_for_eval": text(row.get("question_for_eval")) or None,
        }
        if multi_choice:
            question = "According to the question shown in the image, choose the correct option."
        else:
            question = "According to the question shown in the image, answer the question."
        return Sample(
            id=text(row["sample_index"]),
            images=[image] if image is not None else [],
            question=question,
            answer=answer,
            answer_type="math",
            metadata=metadata,
        )
