"""MMStar (Lin-Chen/MMStar, 1,500 items): vision-indispensable multiple-choice questions.

Confirmed against real rows (`MMStar-Benchmark/MMStar` result sheet): columns `index`,
`question` (options written in it, "\\nOptions: A: ..., B: ...", or MathVista-style
"Choices:\\n(A) ..." for MathVista-sourced rows), `answer` (a letter), `category`,
`l2_category`, `bench`. The hub split `val` (assumed) adds `image` and `meta_info`;
VLMEvalKit's TSV adds a base64 `image`. Local layout: .parquet / .tsv / .xlsx / .jsonl in that
schema; a result sheet without images loads with no images.
"""

from __future__ import annotations

from beacon.benchmarks.base import Benchmark, Row, register
from beacon.benchmarks.options import split_options
from beacon.benchmarks.tables import image_source, text
from beacon.types import Sample


@register
class MMStar(Benchmark):
    name = "mmstar"
    description = "MMStar: multiple-choice questions that need the image, six core abilities."
    hub = "Lin-Chen/MMStar"
    revision = "bc98d668301da7b14f648724866e57302778ab27"
    split = "val"
    categories = (
        "coarse perception",
        "fine-grained perception",
        "instance reasoning",
        "logical reasoning",
        "math",
        "science & technology",
    )

    def to_sample(self, row: Row) -> Sample:
        stem, options = split_options(text(row["question"]))
        index = text(row.get("index")) or str(row["_row"])
        if not options:
            raise ValueError(f"MMStar item {index}: no options found in the question text")
        image = image_source(row.get("image"), encoded=True)
        return Sample(
            id=index,
            images=[image] if image is not None else [],
            question=stem,
            answer=text(row["answer"]).upper(),
            answer_type="choice",
            options=options,
            metadata={
                "category": text(row.get("category")) or None,
                "l2_category": text(row.get("l2_category")) or None,
                "source": text(row.get("bench")) or None,
            },
        )
