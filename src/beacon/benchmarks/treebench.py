"""TreeBench (HaochenWang/TreeBench, 405 items): traceable-evidence visual grounded reasoning.

No real row could be inspected here. From third-party loaders (unconfirmed): one split `train`
with columns `index`, `question`, `multi-choice options` (the options as text, "A. ...\\nB. ..."),
option columns `A`, `B`, ... on some copies, `answer` (a letter), `category` (e.g.
"Perception/OCR"), `l2-category`, `target_instances` (the evidence boxes) and `image` (base64).
Revision pinned from a third-party manifest. Local layout: a .parquet / .tsv / .jsonl file in
that schema. `target_instances` is kept in metadata for grounding hints.
"""

from __future__ import annotations

import json
from typing import Any

from beacon.benchmarks.base import Benchmark, Row, register
from beacon.benchmarks.options import LETTERS, split_options
from beacon.benchmarks.tables import image_source, is_missing, text
from beacon.types import Sample


@register
class TreeBench(Benchmark):
    name = "treebench"
    description = "TreeBench: perception and reasoning questions with traceable evidence boxes."
    hub = "HaochenWang/TreeBench"
    revision = "a4eb437ab71d14f6ab1a4cf05213d0f72f831b71"
    split = "train"
    categories = ("Perception", "Reasoning")

    def to_sample(self, row: Row) -> Sample:
        options = {k: text(row[k]) for k in LETTERS[:11] if k in row and text(row[k])}
        if not options:
            _, parsed = split_options(text(row.get("multi-choice options")))
            options = parsed or {}
        if not options:
            raise ValueError(f"TreeBench item {row.get('index')}: no options found")
        image = image_source(row.get("image"), encoded=True)
        category = text(row.get("category"))
        return Sample(
            id=text(row.get("index")) or str(row["_row"]),
            images=[image] if image is not None else [],
            question=text(row["question"]),
            answer=text(row["answer"]).upper(),
            answer_type="choice",
            options=options,
            metadata={
                "category": category or None,
                "l2_category": text(row.get("l2-category")) or None,
                "target_instances": _parse(row.get("target_instances")),
            },
        )


def _parse(value: Any) -> Any:
    """Evidence boxes as stored (JSON text in TSV copies, a list in parquet)."""
    if isinstance(value, str):
        if is_missing(value):
            return None
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value
