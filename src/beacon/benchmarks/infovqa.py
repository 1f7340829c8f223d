"""InfographicVQA validation (2,801 questions): reading infographics, scored by ANLS.

No real row could be inspected here. Hub copy assumed from lmms-eval's task (unconfirmed
column names): `lmms-lab/DocVQA`, config `InfographicVQA`, split `validation`, columns
`questionId`, `question`, `answers` (list of accepted strings), `answer_type`, `image`.
The original release (infographicVQA_val_v1.0_withQT.json) is an object with a `data` list of
rows with `questionId`, `question`, `answers`, `image_local_name`; images sit in
`infographicsvqa_images/` or beside the JSON. Both layouts load locally (or a parquet in the
hub schema).

Scoring: ANLS with threshold 0.5 against every accepted answer (`metadata["answers"]`,
`metadata["anls"] = True`); `aggregate` reports the mean ANLS.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from beacon.benchmarks.base import Benchmark, Row, register
from beacon.benchmarks.tables import image_source, read_table, table_in, text, with_fields
from beacon.types import Sample

ANLS_THRESHOLD = 0.5


@register
class InfographicVQA(Benchmark):
    name = "infovqa"
    description = "InfographicVQA validation: questions on infographics, scored by ANLS."
    hub = "lmms-lab/DocVQA"
    hub_config = "InfographicVQA"
    revision = "main"
    split = "validation"
    categories = ("infographic",)

    def read_local(self, path: Path) -> Iterable[Row]:
        names = ["infographicVQA_val_v1.0_withQT.json", "infographicVQA_val_v1.0.json"]
        file = table_in(path, names)
        return with_fields(read_table(file), _base=file.parent)

    def to_sample(self, row: Row) -> Sample:
        answers = [text(a) for a in row.get("answers") or [] if text(a)]
        if not answers:
            raise ValueError(f"InfographicVQA question {row.get('questionId')}: no answers")
        return Sample(
            id=text(row.get("questionId")) or str(row["_row"]),
            images=_images(row),
            question=text(row["question"]),
            answer=answers[0],
            answer_type="text",
            metadata={
                "category": "infographic",
                "answers": answers,
                "anls": ANLS_THRESHOLD,
                "answer_kind": _kinds(row.get("answer_type")),
            },
        )

    def aggregate(self, records: list[Mapping[str, Any]]) -> dict[str, float]:
        if not records:
            return {}
        return {"anls": sum(float(r.get("score") or 0.0) for r in records) / len(records)}


def _images(row: Row) -> list[Any]:
    embedded = image_source(row.get("image"))
    if embedded is not None:
        return [embedded]
    name = text(row.get("image_local_name"))
    base = Path(row.get("_base") or ".")
    nested = base / "infographicsvqa_images" / name
    return [nested if nested.exists() else base / name] if name else []


def _kinds(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    return [str(v) for v in value or []]
