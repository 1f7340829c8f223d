"""InfographicVQA validation (2,801 questions): reading infographics, scored by ANLS.

Official release (checked against the RRC download list and several loaders):
`infographicsvqa_qas/infographicsVQA_val_v1.0_withQT.json` (with an "s"; an object whose
`data` list holds rows with `questionId`, `question`, `answers`, `image_local_name`,
`answer_type`, ...) and the images in the sibling folder `infographicsvqa_images/`. The local
path may be the release root, the `infographicsvqa_qas/` folder or the JSON itself.
Hub copy (`lmms-lab/DocVQA`, config `InfographicVQA`, split `validation`; columns assumed from
lmms-eval's task: `questionId`, `question`, `answers`, `answer_type`, `image`): several parquet
shards; a folder of them loads (`validation-*` shards only when test shards sit beside them).

Scoring: ANLS with threshold 0.5 against every accepted answer (`metadata["answers"]`,
`metadata["anls"] = True`); `aggregate` reports the mean ANLS.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from beacon.benchmarks.base import Benchmark, Row, register
from beacon.benchmarks.tables import (
    dataset_root,
    image_source,
    read_table,
    resolve_relative,
    text,
    with_fields,
)
from beacon.types import Sample

ANLS_THRESHOLD = 0.5
_RELEASE_NAMES = ("infographicsVQA_val_v1.0_withQT.json", "infographicsVQA_val_v1.0.json")
_QAS_FOLDER = "infographicsvqa_qas"
_IMAGES_FOLDER = "infographicsvqa_images"


@register
class InfographicVQA(Benchmark):
    """Registered as `infovqa`: the hub's DocVQA/InfographicVQA validation split or the official
    release folder, scored by ANLS so near-miss readings earn partial credit."""

    name = "infovqa"
    description = "InfographicVQA validation: questions on infographics, scored by ANLS."
    hub = "lmms-lab/DocVQA"
    hub_config = "InfographicVQA"
    revision = "2d9ad9f365a9822f0fabe03da12200ea61caf9f2"
    split = "validation"
    categories = ("infographic",)

    def read_local(self, path: Path) -> Iterable[Row]:
        """The official question JSON (file, qas folder or release root) with its image folder, else
        any table `read_table` takes."""
        release = _release_json(path)
        if release is None:
            return read_table(path, split=self.split)
        return with_fields(read_table(release), _base=release.parent)

    def data_root(self, path: Path) -> Path:
        """The release root: the images sit beside `infographicsvqa_qas/`, not inside it."""
        root = dataset_root(path)
        return root.parent if root.name == _QAS_FOLDER else root

    def to_sample(self, row: Row) -> Sample:
        """One question; the first of its gold answers is the reference, all of them go to ANLS."""
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
        """`anls`: the mean per-record ANLS score (the benchmark's official metric, not
        accuracy)."""
        if not records:
            return {}
        return {"anls": sum(float(r.get("score") or 0.0) for r in records) / len(records)}


def _release_json(path: Path) -> Path | None:
    """The official question file at `path` (file, qas folder or release root), else None."""
    if path.is_file():
        return path if path.suffix.lower() == ".json" else None
    for folder in (path, path / _QAS_FOLDER):
        for name in _RELEASE_NAMES:
            if (folder / name).is_file():
                return folder / name
    return None


def _images(row: Row) -> list[Any]:
    embedded = image_source(row.get("image"))
    if embedded is not None:
        return [embedded]
    name = text(row.get("image_local_name"))
    if not name:
        return []
    base = Path(row.get("_base") or ".")
    anchors = [base.parent / _IMAGES_FOLDER, base / _IMAGES_FOLDER, base]
    return [resolve_relative(name, anchors)]


def _kinds(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    return [str(v) for v in value or []]
