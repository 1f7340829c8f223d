"""HallusionBench (1,129 yes/no questions): language hallucination and visual illusion.

Confirmed against real rows (`tianyi-lab/HallusionBench` HallusionBench.json): a JSON list in
which every value is a string, `gt_answer` "1" = yes / "0" = no, `visual_input` "0" means no
image (`filename` null), and questions come in sets (`set_id`) asked about several figures
(`figure_id`). Images ship separately; `filename` ("./VS/chart/0_1.png") is relative to the
folder of the JSON file. The hub copy (lmms-lab/HallusionBench, splits `image` and
`non_image`, an `image` column) is assumed to keep the same columns.

Metrics (the official `get_eval_pair_all` / `get_eval_fig`):
- aAcc: accuracy over all questions;
- qAcc: question-pair accuracy, a question (category, subcategory, set_id, question_id) counts
  when it is answered right for every figure it is asked about;
- fAcc: figure accuracy, a figure (category, subcategory, set_id, figure_id) counts when every
  question about it is right; VS questions with figure_id "0" have no figure and are left out.
Deviation: the official script counts an "uncertain" judge verdict as correct on VS questions
without a figure; rule-based scoring has no "uncertain", so it is scored like any other answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from itertools import chain
from pathlib import Path
from typing import Any

from beacon.benchmarks.base import Benchmark, Row, register
from beacon.benchmarks.grouped import accuracy, group_accuracy
from beacon.benchmarks.tables import (
    hub_rows,
    image_source,
    read_table,
    table_in,
    text,
    with_fields,
)
from beacon.types import Sample


@register
class HallusionBench(Benchmark):
    name = "hallusionbench"
    description = "HallusionBench: paired yes/no questions probing hallucination and illusion."
    hub = "lmms-lab/HallusionBench"
    revision = "ea5fd49f1b711d12cc8b0ec75be0c0593e17befe"
    split = "image+non_image"
    categories = ("VD", "VS")

    def read_hub(self) -> Iterator[Row]:
        splits = ("image", "non_image")
        return chain.from_iterable(
            hub_rows(self.hub, config=None, revision=self.revision, split=s) for s in splits
        )

    def read_local(self, path: Path) -> Iterable[Row]:
        file = table_in(path, ["HallusionBench.json"])
        return with_fields(read_table(file), _base=file.parent)

    def to_sample(self, row: Row) -> Sample:
        fields = {
            key: text(row.get(key))
            for key in ("category", "subcategory", "set_id", "figure_id", "question_id")
        }
        visual = text(row.get("visual_input"))
        image = None if visual == "0" else _image(row)
        sample_id = "_".join(fields[k] for k in fields)
        return Sample(
            id=sample_id,
            images=[image] if image is not None else [],
            question=text(row["question"]),
            answer="yes" if text(row["gt_answer"]) == "1" else "no",
            answer_type="yesno",
            metadata={
                **fields,
                "visual_input": visual,
                "sample_note": text(row.get("sample_note")),
                "gt_answer_details": text(row.get("gt_answer_details")),
            },
        )

    def record_meta(self, sample: Sample) -> dict[str, Any]:
        m = sample.metadata
        question = "_".join([m["category"], m["subcategory"], m["set_id"], m["question_id"]])
        no_figure = m["category"] == "VS" and m["figure_id"] == "0"
        figure = "_".join([m["category"], m["subcategory"], m["set_id"], m["figure_id"]])
        return {"question_group": question, "figure_group": None if no_figure else figure}

    def aggregate(self, records: list[Mapping[str, Any]]) -> dict[str, float]:
        if not records:
            return {}
        return {
            "aAcc": accuracy(records),
            "qAcc": group_accuracy(records, "question_group"),
            "fAcc": group_accuracy(records, "figure_group"),
        }


def _image(row: Row) -> Any:
    embedded = image_source(row.get("image"))
    if embedded is not None:
        return embedded
    filename = text(row.get("filename"))
    return image_source(filename.removeprefix("./"), row.get("_base")) if filename else None
