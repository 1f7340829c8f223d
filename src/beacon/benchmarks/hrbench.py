"""HR-Bench 4K / 8K (DreamMr/HR-Bench): fine-grained questions on 4K and 8K images.

No real row could be inspected here; the format comes from the VLMEvalKit and lmms-eval task
code: one TSV / parquet per resolution (`hr_bench_4k.tsv`, `hr_bench_4k.parquet`; hub config
`hrbench_version_split`, splits `hrbench_4k` / `hrbench_8k`) with columns `index`, `question`,
`A`-`D`, `answer` (a letter), `category` (`single` / `cross` instance), `cycle_category` and
`image` (base64 JPEG, several MB per row). Each question appears four times with its options
rotated (one copy per `cycle_category`). Assumed, not confirmed: the exact `cycle_category`
values and that the copies share question text and option set, which is how copies are grouped
here (question + sorted option texts). The base64 is turned into bytes; nothing is decoded.

Metrics: `accuracy` over all rows (VLMEvalKit's average over cycles when cycles are the same
size) and `circular_accuracy`, the strict circular score: a question counts only when all of its
rotated copies are answered right.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from beacon.benchmarks.base import Benchmark, Row, register
from beacon.benchmarks.grouped import accuracy, group_accuracy, group_count
from beacon.benchmarks.tables import image_source, read_table, table_in, text
from beacon.types import Sample


class HRBench(Benchmark):
    hub = "DreamMr/HR-Bench"
    hub_config = "hrbench_version_split"
    revision = "main"
    categories = ("single", "cross")

    def read_local(self, path: Path) -> Iterable[Row]:
        """A .tsv / .parquet file, or a folder holding hr_bench_<res>.parquet or .tsv."""
        stem = f"hr_bench_{self.split.removeprefix('hrbench_')}"
        return read_table(table_in(path, [f"{stem}.parquet", f"{stem}.tsv"]))

    def to_sample(self, row: Row) -> Sample:
        options = {letter: text(row[letter]) for letter in "ABCD" if text(row.get(letter))}
        question = text(row["question"])
        image = image_source(row.get("image"), encoded=True)
        return Sample(
            id=text(row.get("index")) or str(row["_row"]),
            images=[image] if image is not None else [],
            question=question,
            answer=text(row["answer"]).upper(),
            answer_type="choice",
            options=options,
            metadata={
                "category": text(row.get("category")) or None,
                "cycle_category": text(row.get("cycle_category")) or None,
                "circular_group": _group_id(question, options),
            },
        )

    def record_meta(self, sample: Sample) -> dict[str, Any]:
        return {
            "circular_group": sample.metadata["circular_group"],
            "cycle": sample.metadata.get("cycle_category"),
        }

    def aggregate(self, records: list[Mapping[str, Any]]) -> dict[str, float]:
        if not records:
            return {}
        return {
            "accuracy": accuracy(records),
            "circular_accuracy": group_accuracy(records, "circular_group"),
            "circular_groups": float(group_count(records, "circular_group")),
        }


def _group_id(question: str, options: Mapping[str, str]) -> str:
    """Same id for the rotated copies of one question: question + its options as a set."""
    key = "\x1f".join([question, *sorted(options.values())])
    return hashlib.sha1(key.encode("utf-8")).hexdigest()[:16]


@register
class HRBench4K(HRBench):
    name = "hrbench_4k"
    description = "HR-Bench 4K: single- and cross-instance questions on 4K images (circular)."
    split = "hrbench_4k"


@register
class HRBench8K(HRBench):
    name = "hrbench_8k"
    description = "HR-Bench 8K: single- and cross-instance questions on 8K images (circular)."
    split = "hrbench_8k"
