"""ChartQA test (2,500 questions, human-written and machine-generated), relaxed accuracy.

Confirmed against real rows (`vis-nlp/ChartQA` test_human.json / test_augmented.json): JSON
lists of `{imgname, query, label}`, `label` always a string ("14", "0.57", "Yes"), images in
`png/<imgname>` beside the JSON files. The hub copy used by lmms-eval (`lmms-lab/ChartQA`, split
`test`; columns `type` = human_test / augmented_test, `question`, `answer`, `image`) is read as
well. Local layout: the `test/` folder (both JSON files + png/) or one of the JSON files.

Scoring (the ChartQA paper's relaxed accuracy): a numeric answer is right within 5 % relative
error (`metadata["relaxed_tol"]`), anything else needs an exact (case-insensitive) match.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from beacon.benchmarks.base import Benchmark, Row, register
from beacon.benchmarks.tables import image_source, read_table, text
from beacon.types import Sample

RELAXED_TOL = 0.05
_FILES = {"human": "test_human.json", "augmented": "test_augmented.json"}


@register
class ChartQA(Benchmark):
    name = "chartqa"
    description = "ChartQA test: questions on real charts, relaxed accuracy (5 % for numbers)."
    hub = "lmms-lab/ChartQA"
    revision = "9e63b7df1592a1c2158e735cc1725454aef0d6d9"
    split = "test"
    categories = ("human", "augmented")

    def read_local(self, path: Path) -> Iterator[Row]:
        files = [path / name for name in _FILES.values()] if path.is_dir() else [path]
        found = [file for file in files if file.exists()]
        if not found:
            raise FileNotFoundError(f"no {' or '.join(_FILES.values())} in {path}")
        for file in found:
            kind = "augmented" if "augmented" in file.name else "human"
            for position, row in enumerate(read_table(file)):
                yield {**row, "_kind": kind, "_position": position, "_base": file.parent}

    def to_sample(self, row: Row) -> Sample:
        kind = row.get("_kind") or text(row.get("type")).removesuffix("_test") or None
        position = row.get("_position", row["_row"])
        answer = _first(row.get("label", row.get("answer")))
        return Sample(
            id=f"{kind}_{position}" if kind else str(position),
            images=_images(row),
            question=text(row.get("query") or row.get("question")),
            answer=answer,
            answer_type="number" if is_number(answer) else "text",
            metadata={"category": kind, "relaxed_tol": RELAXED_TOL},
        )


def _first(value: object) -> str:
    if isinstance(value, list | tuple):
        return text(value[0]) if value else ""
    return text(value)


def _images(row: Row) -> list:
    embedded = image_source(row.get("image"))
    if embedded is not None:
        return [embedded]
    name = text(row.get("imgname"))
    if not name:
        return []
    base = Path(row.get("_base") or ".")
    in_png = base / "png" / name
    return [in_png if in_png.exists() or not (base / name).exists() else base / name]


def is_number(answer: str) -> bool:
    """True for answers the relaxed metric compares numerically ("14", "0.57", "62%")."""
    try:
        float(answer.strip().removesuffix("%").replace(",", ""))
    except ValueError:
        return False
    return True
