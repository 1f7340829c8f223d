"""V* Bench (craigwu/vstar_bench, 191 items): attribute and spatial questions on small objects.

No real row could be inspected here. Assumed from other projects' loaders (unconfirmed): the
repo holds `test_questions.jsonl`, one row per question with `image` (a path such as
"direct_attributes/sa_4690.jpg", relative to the repo root), `text` (question, then one
"(A) ..." line per option, then "Answer with the option's letter from the given choices
directly."), `category` (`direct_attributes` / `relative_position`), `question_id` and
`label`; beside each image a JSON file with `target_object` and `bbox` (x, y, w, h, one box
per target), copied into `metadata["annotation"]` when present, with the boxes also given as
`metadata["regions"]` / `metadata["region"]` in (x0, y0, x1, y1) like `synth`'s.
The hub branch downloads the repo snapshot and reads the same files. Local layout: the repo
folder, or the jsonl with the image folders beside it. An image or annotation that resolves
outside that folder, or is no regular file, skips its row (`Benchmark.load`).

The gold is `label`; the hub labels are not all "A", so a row without one is an error, not a
default. Options are shuffled with the load seed all the same (the gold was listed first in
early copies); `metadata["option_permutation"]` records the order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from beacon.benchmarks.base import Benchmark, Row, register
from beacon.benchmarks.options import split_options
from beacon.benchmarks.tables import BadRow, read_table, table_in, text, with_fields
from beacon.files import read_file
from beacon.types import Sample

_ANNOTATION_MAX_BYTES = 1 << 20
_INSTRUCTION = re.compile(
    r"\n?Answer with the option's letter from the given choices directly\.?\s*$"
)


@register
class VStar(Benchmark):
    name = "vstar"
    description = "V* Bench: attribute and relative-position questions about small objects."
    hub = "craigwu/vstar_bench"
    revision = "d9ae62c903da0c98336e85c5ee89cd863b04b4da"
    split = "test"
    categories = ("direct_attributes", "relative_position")
    shuffle = True

    def read_hub(self) -> Iterable[Row]:
        return self.read_snapshot()

    def read_local(self, path: Path) -> Iterable[Row]:
        file = table_in(path, ["test_questions.jsonl"])
        return with_fields(read_table(file), _base=file.parent)

    def to_sample(self, row: Row) -> Sample:
        stem, options = split_options(_INSTRUCTION.sub("", text(row["text"])))
        if not options:
            raise ValueError(f"V* question {row.get('question_id')}: no '(A) ...' option lines")
        image = Path(row["_base"]) / text(row["image"])
        metadata = {"category": text(row.get("category")) or None, "image_file": row["image"]}
        annotation = image.with_suffix(".json")
        if annotation.is_file():
            metadata["annotation"] = _annotation(annotation, row.get("_root"))
            metadata.update(_regions(metadata["annotation"].get("bbox")))
        return Sample(
            id=text(row.get("question_id")) or str(row["_row"]),
            images=[image],
            question=stem,
            answer=_gold(row),
            answer_type="choice",
            options=options,
            metadata=metadata,
        )


def _annotation(path: Path, root: Path | None) -> dict[str, Any]:
    """The per-image JSON: a regular file under the dataset root, at most 1 MiB (V*'s are a few
    hundred bytes), holding an object; anything else skips the row (`Benchmark.load`)."""
    try:
        data = json.loads(read_file(path, root, _ANNOTATION_MAX_BYTES))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRow("bad_annotation", f"V* annotation {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRow("bad_annotation", f"V* annotation {path} holds no JSON object")
    return data


def _gold(row: Row) -> str:
    """The published label; a row without one is an error, never a default letter."""
    label = text(row.get("label")).upper()
    if not label:
        raise ValueError(
            f"V* question {row.get('question_id')}: no `label`; the hub labels are not all "
            "'A', so a missing gold cannot be guessed. Check that the local copy is complete."
        )
    return label


def _regions(boxes: object) -> dict[str, object]:
    """(x, y, w, h) target boxes as (x0, y0, x1, y1) regions and their union; {} if malformed."""
    if not isinstance(boxes, list) or not boxes:
        return {}
    if all(isinstance(v, int | float) for v in boxes):
        boxes = [boxes]
    if not all(isinstance(b, list) and len(b) == 4 for b in boxes):
        return {}
    regions = [[x, y, x + w, y + h] for x, y, w, h in boxes]
    union = [min(r[0] for r in regions), min(r[1] for r in regions)]
    union += [max(r[2] for r in regions), max(r[3] for r in regions)]
    return {"regions": regions, "region": union}
