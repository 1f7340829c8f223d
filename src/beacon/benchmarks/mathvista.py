"""MathVista testmini (AI4Math/MathVista, 1,000 items): math reasoning over figures.

Confirmed against real rows (`lupantech/MathVista` data/testmini.json): the release is a JSON
object keyed by pid; multiple-choice `answer` is the option *text* (mapped here to its letter),
free-form answers carry `answer_type` integer / float / list / text and a `precision` for floats.
The hub split `testmini` has the same columns plus `decoded_image` (the image bytes) and `query`.
Local layout: `testmini.json` with `images/<pid>.jpg` beside it.

The prompt keeps the question, the unit and, for float and list answers, the required form
(MathVista's own hint line); the "answer with the option letter" instruction is left to the
agent format. Categories are MathVista's five tasks.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from beacon.benchmarks.base import Benchmark, Row, register
from beacon.benchmarks.options import option_letter, options_from_list
from beacon.benchmarks.tables import image_source, read_table, table_in, text, with_fields
from beacon.types import AnswerType, Sample

_ANSWER_TYPES: dict[str, AnswerType] = {
    "integer": "number",
    "float": "number",
    "list": "list",
    "text": "text",
}


@register
class MathVista(Benchmark):
    name = "mathvista"
    description = "MathVista testmini: math reasoning over charts, plots, geometry and photos."
    hub = "AI4Math/MathVista"
    revision = "2b6ad69445fbb5695c9b165475e8decdbeb97747"
    split = "testmini"
    categories = (
        "figure question answering",
        "geometry problem solving",
        "math word problem",
        "textbook question answering",
        "visual question answering",
    )
    image_columns = ("decoded_image",)

    def read_local(self, path: Path) -> Iterable[Row]:
        file = table_in(path, ["testmini.json", "test.json"])
        return with_fields(read_table(file), _base=file.parent)

    def to_sample(self, row: Row) -> Sample:
        meta = dict(row.get("metadata") or {})
        pid = text(row.get("pid") or row.get("_key"))
        choices = row.get("choices")
        image = image_source(row.get("decoded_image")) or image_source(
            row.get("image"), row.get("_base")
        )
        answer = text(row["answer"])
        metadata = {
            "category": meta.get("task"),
            "source": meta.get("source"),
            "context": meta.get("context"),
            "skills": list(meta.get("skills") or []),
            "language": meta.get("language"),
            "precision": _int_or_none(row.get("precision")),
            "unit": text(row.get("unit")) or None,
            "original_answer": answer,
        }
        if row.get("question_type") == "multi_choice" and choices:
            options = options_from_list([str(c) for c in choices])
            letter = option_letter(options, answer)
            if letter is None:
                raise ValueError(f"MathVista pid {pid}: answer {answer!r} is not among {choices}")
            return Sample(
                id=pid,
                images=[image] if image is not None else [],
                question=self._question(row),
                answer=letter,
                answer_type="choice",
                options=options,
                metadata=metadata,
            )
        return Sample(
            id=pid,
            images=[image] if image is not None else [],
            question=self._question(row),
            answer=answer,
            answer_type=_ANSWER_TYPES.get(text(row.get("answer_type")), "text"),
            metadata=metadata,
        )

    @staticmethod
    def _question(row: Row) -> str:
        question = text(row["question"])
        unit = text(row.get("unit"))
        if unit:
            question += f" (Unit: {unit})"
        precision = _int_or_none(row.get("precision"))
        kind = text(row.get("answer_type"))
        if row.get("question_type") != "multi_choice" and kind == "float" and precision:
            places = "place" if precision == 1 else "places"
            question += f"\nGive the answer as a number with {precision} decimal {places}."
        elif row.get("question_type") != "multi_choice" and kind == "list":
            question += "\nGive the answer as a Python list."
        return question


def _int_or_none(value: object) -> int | None:
    cell = text(value)
    return int(float(cell)) if cell else None
