"""TreeBench (HaochenWang/TreeBench, 405 items): traceable-evidence visual grounded reasoning.

No real row could be inspected here. From third-party loaders (unconfirmed): one split `train`
with columns `index`, `question`, `multi-choice options` (the options as text, "A. ...\\nB. ..."),
option columns `A`, `B`, ... on some copies, `answer` (a letter), `category` (e.g.
"Perception/OCR"), `l2-category`, `target_instances` (the evidence boxes) and `image` (base64).
Revision pinned from a third-party manifest. Local layout: a .parquet / .tsv / .jsonl file in
that schema. `target_instances` is kept in metadata for grounding hints; it is parsed as JSON,
else as a Python literal (`ast.literal_eval`, never `eval`: TSV exports write the list with
single quotes), else kept as text. A row without options does not abort the load: a bare
letter gold is scored by the verifier's bare-letter rule (`answer_type="math"`), any other gold
as text, and a warning names the row.
"""

from __future__ import annotations

import ast
import json
import logging
from typing import Any

from beacon.benchmarks.base import Benchmark, Row, register
from beacon.benchmarks.options import LETTERS, split_options
from beacon.benchmarks.tables import image_source, is_missing, text
from beacon.types import Sample

logger = logging.getLogger(__name__)


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
        answer = text(row["answer"])
        if not options:
            logger.warning("TreeBench item %s has no options; scored without", row.get("index"))
        image = image_source(row.get("image"), encoded=True)
        category = text(row.get("category"))
        return Sample(
            id=text(row.get("index")) or str(row["_row"]),
            images=[image] if image is not None else [],
            question=text(row["question"]),
            answer=answer.upper() if options or _is_letter(answer) else answer,
            answer_type="choice" if options else ("math" if _is_letter(answer) else "text"),
            options=options or None,
            metadata={
                "category": category or None,
                "l2_category": text(row.get("l2-category")) or None,
                "target_instances": _parse(row.get("target_instances")),
            },
        )


def _is_letter(answer: str) -> bool:
    return len(answer) == 1 and answer.isalpha()


def _parse(value: Any) -> Any:
    """Evidence boxes as stored: a list in parquet; JSON or a Python literal in text copies."""
    if not isinstance(value, str):
        return value
    if is_missing(value):
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value
