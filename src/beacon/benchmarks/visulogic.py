"""VisuLogic (VisuLogic/VisuLogic, 1,000 items): visual logic puzzles with four options.

No real row could be inspected here. From third-party loaders (unconfirmed): the repo holds
`data.jsonl` (`id` "00000".., `question` with the options written in it, `label` A-D, `tag`
the puzzle type, `image_path` "images/00000.png") and `images.zip`; revision pinned from a
third-party manifest that checks 1,000 rows with labels A 231 / B 267 / C 252 / D 250. The gold
is the `label` column (a third-party builder asserts it is one of A-D). An `image_path` written
with a leading "./" names the same file or zip member.

Images are read from the folder if unpacked, else as bytes from the zip (one member per sample,
no full extraction). The hub branch downloads the repo snapshot. Local layout: the repo folder
(data.jsonl + images/ or images.zip) or data.jsonl itself. When the options are drawn in the
image only, the gold is a bare letter with `answer_type="math"` (the verifier's bare-letter
rule).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from beacon.benchmarks.base import Benchmark, Row, register
from beacon.benchmarks.options import split_options
from beacon.benchmarks.tables import ZipImages, read_table, release_image, table_in, text
from beacon.types import Sample


@register
class VisuLogic(Benchmark):
    name = "visulogic"
    description = "VisuLogic: visual logic puzzles (quantity, position, style, spatial...)."
    hub = "VisuLogic/VisuLogic"
    revision = "3e483f8cca0bc766ecc5f70299f2b8a34b5035ca"
    split = "test"
    categories = (
        "Quantitative Reasoning",
        "Spatial Reasoning",
        "Positional Reasoning",
        "Attribute Reasoning",
        "Stylistic Reasoning",
        "Other",
    )

    def read_hub(self) -> Iterable[Row]:
        return self.read_snapshot()

    def read_local(self, path: Path) -> Iterator[Row]:
        file = table_in(path, ["data.jsonl"])
        zipped = file.parent / "images.zip"
        archive = ZipImages(zipped) if zipped.is_file() else None
        for row in read_table(file):
            yield {**row, "_base": file.parent, "_zip": archive}

    def to_sample(self, row: Row) -> Sample:
        stem, options = split_options(text(row["question"]))
        return Sample(
            id=text(row.get("id")) or str(row["_row"]),
            images=[release_image(_image_path(row), Path(row["_base"]), row.get("_zip"))],
            question=stem if options else text(row["question"]),
            answer=text(row["label"]).upper(),
            answer_type="choice" if options else "math",
            options=options,
            metadata={"category": text(row.get("tag")) or None},
        )


def _image_path(row: Row) -> str:
    """`image_path` without the leading "./" some copies write."""
    return text(row["image_path"]).removeprefix("./")
