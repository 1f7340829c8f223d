"""AI2D test (lmms-lab/ai2d, 3,088 items): science-diagram multiple choice.

No real row could be inspected here. Hub schema from lmms-eval's task code (confirmed in that
code, not on data): columns `question`, `options` (list of option texts), `answer` (the index of
the right option, as a string) and `image`. Local layout: a .parquet / .jsonl file in that schema.
"""

from __future__ import annotations

from beacon.benchmarks.base import Benchmark, Row, register
from beacon.benchmarks.options import LETTERS, options_from_list
from beacon.benchmarks.tables import image_source, text
from beacon.types import Sample


@register
class AI2D(Benchmark):
    name = "ai2d"
    description = "AI2D: grade-school science diagrams, multiple choice."
    hub = "lmms-lab/ai2d"
    revision = "c83a9b9692933aff8349157c88a413df9d02c4e5"
    split = "test"
    categories = ("diagram",)

    def to_sample(self, row: Row) -> Sample:
        choices = [str(c) for c in row["options"]]
        index = int(text(row["answer"]))
        if not 0 <= index < len(choices):
            raise ValueError(f"AI2D row {row['_row']}: answer index {index} outside {choices}")
        image = image_source(row.get("image"))
        return Sample(
            id=text(row.get("id")) or str(row["_row"]),
            images=[image] if image is not None else [],
            question=text(row["question"]),
            answer=LETTERS[index],
            answer_type="choice",
            options=options_from_list(choices),
            metadata={"category": "diagram"},
        )
