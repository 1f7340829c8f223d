"""BabyVision (UnipatAI/BabyVision, 388 items): visual skills a three-year-old has, and MLLMs lack.

Checked against the official repo (UniPat-AI/BabyVision @ 7f92fd4, `babyvision_eval/`): the
evaluator reads `meta_data.jsonl` from `data/babyvision_data.zip` (unpacked to
`babyvision_data/meta_data.jsonl` + `images/`), one row per task with `taskId`, `question`,
`image` (a path relative to the jsonl), `options` (a list), `choiceAns` (0-based index of the
right option), `blankAns` (the gold of fill-in items), `ansType` ("choice" / "blank"), `type`,
`subtype` and `coT`. Choice items are asked as the question plus lettered options and their
gold is the letter `chr(65 + choiceAns)`; blank items are asked as the question, gold
`blankAns`. Four types (Fine-grained Discrimination, Visual Tracking, Spatial Perception,
Visual Pattern Recognition; 163 / 83 / 91 / 51 items by a third-party count) and 22 subtypes.
The hub copy (one split `train`, one parquet `data/train-00000-of-00001.parquet`, revision
849cbee from a third-party manifest whose short hash matches the hub page) has the same
columns with `image` an image struct. Local layout: the parquet (or a folder of shards), the
unpacked release folder, its meta_data.jsonl, or `babyvision_data.zip` itself.

Scoring. The official evaluator takes the last `\\boxed{}` and asks an LLM judge True/False for
every item, choice items included, then averages three passes. Here rules decide first:
choice items by the option letter (`beacon.verify`), blank items that are grid coordinates
("(4,7)", "10,5", "Row 4 Column 17": the gold's form in the published results) by their
integers in order (`beacon.verify.coordinates`), numbers as numbers, other text by normalized
match; the judge (when configured) decides what the rules cannot read, and free text that
does not match exactly. Samples carry `category` = type; `aggregate` adds the accuracy per
subtype ("subtype/<type>/<subtype>") and `accuracy`.
"""

from __future__ import annotations

import io
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from beacon.benchmarks.base import Benchmark, Row, register
from beacon.benchmarks.grouped import accuracy
from beacon.benchmarks.options import LETTERS, options_from_list
from beacon.benchmarks.tables import (
    ZipImages,
    image_source,
    is_missing,
    read_table,
    release_image,
    text,
    with_fields,
)
from beacon.jsonl import parse_jsonl
from beacon.types import ImageSource, Sample
from beacon.verify import verify
from beacon.verify.coordinates import is_coordinate, verify_coordinates

META_FILE = "meta_data.jsonl"
RELEASE_FOLDER = "babyvision_data"
_GRID_WORDS = re.compile(r"\b(?:rows?|columns?|coordinates?)\b", re.IGNORECASE)


@register
class BabyVision(Benchmark):
    name = "babyvision"
    description = "BabyVision: basic visual skills (discrimination, tracking, spatial, patterns)."
    hub = "UnipatAI/BabyVision"
    revision = "849cbeea2b1d00ad334e9e1e2b49a1960c9ff3f3"
    split = "train"
    categories = (
        "Fine-grained Discrimination",
        "Visual Tracking",
        "Spatial Perception",
        "Visual Pattern Recognition",
    )

    def read_local(self, path: Path) -> Iterable[Row]:
        if path.suffix.lower() == ".zip":
            return _zip_rows(path)
        meta = _meta_file(path)
        if meta is None:
            return read_table(path, split=self.split)
        return with_fields(read_table(meta), _base=meta.parent)

    def to_sample(self, row: Row) -> Sample:
        task_id = text(row.get("taskId")) or str(row["_row"])
        kind = text(row.get("ansType")).lower()
        question = text(row["question"])
        metadata: dict[str, Any] = {
            "category": text(row.get("type")) or None,
            "subtype": text(row.get("subtype")) or None,
            "ans_type": kind,
        }
        image = _image(row)
        sample = Sample(
            id=task_id,
            images=[image] if image is not None else [],
            question=question,
            answer="",
            metadata=metadata,
        )
        if kind == "choice":
            return _as_choice(sample, row)
        if kind == "blank":
            return _as_blank(sample, row)
        raise ValueError(
            f"BabyVision task {task_id}: ansType={row.get('ansType')!r}, expected 'choice' or "
            "'blank'; is this the BabyVision release?"
        )

    def score(self, response: str, sample: Sample, *, judge: Any = None) -> Any:
        if sample.metadata.get("coordinate"):
            return verify_coordinates(response, sample, judge)
        return verify(response, sample, judge=judge)

    def record_meta(self, sample: Sample) -> dict[str, Any]:
        return {"subtype": f"{sample.category}/{sample.metadata.get('subtype')}"}

    def aggregate(self, records: list[Mapping[str, Any]]) -> dict[str, float]:
        if not records:
            return {}
        by_subtype: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
        for record in records:
            by_subtype[(record.get("meta") or {}).get("subtype")].append(record)
        metrics = {"accuracy": accuracy(records)}
        for subtype in sorted(k for k in by_subtype if k is not None):
            metrics[f"subtype/{subtype}"] = accuracy(by_subtype[subtype])
        return metrics


def _meta_file(path: Path) -> Path | None:
    """meta_data.jsonl at `path`: the file, the unpacked folder, or the folder above it."""
    if path.is_file():
        return path if path.name == META_FILE else None
    for folder in (path, path / RELEASE_FOLDER):
        if (folder / META_FILE).is_file():
            return folder / META_FILE
    return None


def _zip_rows(path: Path) -> Iterator[Row]:
    """Rows of meta_data.jsonl inside the release zip; images stay in the zip until used."""
    archive = ZipImages(path)
    member = archive.find(META_FILE)
    if member is None:
        raise FileNotFoundError(f"{path} holds no {META_FILE}; is it babyvision_data.zip?")
    prefix = member.removesuffix(META_FILE)
    lines = io.BytesIO(archive.read(member))
    for row in parse_jsonl(lines, f"{path}:{member}", whole=True):
        yield {**row, "_zip": archive, "_prefix": prefix}


def _image(row: Row) -> ImageSource | None:
    cell = row.get("image")
    if isinstance(cell, Mapping | bytes | bytearray):
        return image_source(cell)
    name = text(cell)
    if not name:
        return None
    if "_zip" in row:
        return row["_zip"].read(row["_prefix"] + name.removeprefix("./"))
    return release_image(name, Path(row.get("_base") or "."), None)


def _as_choice(sample: Sample, row: Row) -> Sample:
    choices = [str(c) for c in row.get("options") or []]
    index = None if is_missing(row.get("choiceAns")) else int(float(row["choiceAns"]))
    if index is None or not 0 <= index < len(choices):
        raise ValueError(
            f"BabyVision task {sample.id}: choiceAns={row.get('choiceAns')!r} does not index "
            f"its {len(choices)} options"
        )
    sample.options = options_from_list(choices)
    sample.answer = LETTERS[index]
    sample.answer_type = "choice"
    return sample


def _as_blank(sample: Sample, row: Row) -> Sample:
    gold = text(row.get("blankAns"))
    if not gold:
        raise ValueError(f"BabyVision task {sample.id}: a blank item without blankAns")
    sample.answer = gold
    sample.answer_type = "text"
    sample.metadata["coordinate"] = is_coordinate(gold) and _asks_for_a_cell(sample, gold)
    return sample


def _asks_for_a_cell(sample: Sample, gold: str) -> bool:
    """A grid cell, not a list of numbers: bracketed or row/column wording in gold or question.

    "3, 5" alone could be two picked items in any order; the coordinate rule compares in order.
    """
    bracketed = gold.strip().startswith(("(", "["))
    return bracketed or bool(_GRID_WORDS.search(gold) or _GRID_WORDS.search(sample.question))
