"""TIR-Bench (Agents-X/TIR-Bench, 1,215 items, 13 tasks): problems that need code on the image.

Checked against the official repo (agents-x-project/TIR-Bench @ f79c756: `calculate_score.py`,
`tools.py`, `extract_answer.py`) and published sample rows: the hub repo holds `TIR-Bench.json`
(a JSON array) and `data.zip`, which unpacks to `data/<task>/...`. Each row has `id`, `task`,
`prompt` (the question, options written inside it), `answer` (a letter, letters, an integer,
a decimal, or a list-like string such as "[4, 1, 8, 9, 3, 6, 2, 7, 5]" / "7, 11, 12"),
`image_1` ("data/maze/17.png", relative to the JSON's folder), `image_2` (the second image of
spot-the-difference items, else null) and `meta_data` ({} or, for jigsaw, {"difficulty": n}).
Tasks: color, contrast (low-light), instrument, jigsaw, math, maze, ocr (rotated text),
refcoco (proportion), rotation_game, spot_difference, symbolic, visual_search, word_search.
Revision ae9976e from a third-party audit (not checked against the hub here). Local layout:
the folder with TIR-Bench.json and `data/` unpacked or `data.zip` (images are then read from
the zip on demand), or the JSON itself.

Scoring: `beacon.verify.tirbench` applies the official task rules to our extracted answer;
jigsaw (per-position accuracy) and spot-the-difference (set IoU) give partial credit in
`Verdict.score`, `correct` is a full score. The judge only stands in when no answer can be
read. `category` is the task; `aggregate` reports `score` (the benchmark's number: mean
credit), `accuracy` (full credit only) and `score/<task>`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from beacon.benchmarks.base import Benchmark, Row, register
from beacon.benchmarks.grouped import accuracy
from beacon.benchmarks.options import split_options
from beacon.benchmarks.tables import (
    ZipImages,
    read_table,
    release_image,
    table_in,
    text,
)
from beacon.types import AnswerType, ImageSource, Sample
from beacon.verify.fallback import judge_unparsed
from beacon.verify.tirbench import TIRItem, score_tirbench

RELEASE_JSON = "TIR-Bench.json"
IMAGES_ZIP = "data.zip"
TASKS = (
    "color",
    "contrast",
    "instrument",
    "jigsaw",
    "math",
    "maze",
    "ocr",
    "refcoco",
    "rotation_game",
    "spot_difference",
    "symbolic",
    "visual_search",
    "word_search",
)
_INLINE_OPTION = re.compile(r"\(([A-J])\)\s*(.*?)\s*(?=\([A-J]\)|$)", re.S)


@register
class TIRBench(Benchmark):
    name = "tirbench"
    description = "TIR-Bench: 13 tasks that need code or image manipulation (partial credit)."
    hub = "Agents-X/TIR-Bench"
    revision = "ae9976e81e86c4797fd0d28f9119393b37d9d006"
    split = "test"
    categories = TASKS

    def read_hub(self) -> Iterable[Row]:
        return self.read_snapshot()

    def read_local(self, path: Path) -> Iterator[Row]:
        file = table_in(path, [RELEASE_JSON])
        archive_path = file.parent / IMAGES_ZIP
        archive = ZipImages(archive_path) if archive_path.is_file() else None
        for row in read_table(file):
            yield {**row, "_base": file.parent, "_zip": archive}

    def to_sample(self, row: Row) -> Sample:
        task = text(row.get("task"))
        gold = text(row.get("answer"))
        if not task or not gold:
            raise ValueError(f"TIR-Bench item {row.get('id')}: needs `task` and `answer`")
        prompt = text(row["prompt"])
        meta = row.get("meta_data") or {}
        images = [_image(row, key) for key in ("image_1", "image_2") if text(row.get(key))]
        return Sample(
            id=text(row.get("id")) or str(row["_row"]),
            images=images,
            question=prompt,
            answer=gold,
            answer_type=_answer_type(task, gold),
            metadata={
                "category": task,
                "jigsaw_size": _size(meta.get("difficulty")) if task == "jigsaw" else None,
                "image_1": text(row.get("image_1")),
                "prompt_options": _prompt_options(prompt),
                "meta_data": dict(meta),
            },
        )

    def score(self, response: str, sample: Sample, *, judge: Any = None) -> Any:
        item = TIRItem(
            task=sample.category or "",
            gold=sample.answer,
            options=sample.metadata.get("prompt_options"),
            jigsaw_size=sample.metadata.get("jigsaw_size"),
            image_1=sample.metadata.get("image_1", ""),
        )
        verdict = score_tirbench(response, item)
        return judge_unparsed(response, sample, verdict, judge, sample.answer)

    def aggregate(self, records: list[Mapping[str, Any]]) -> dict[str, float]:
        if not records:
            return {}
        by_task: dict[str, list[float]] = defaultdict(list)
        for record in records:
            by_task[str(record.get("category"))].append(float(record.get("score") or 0.0))
        scores = [s for values in by_task.values() for s in values]
        metrics = {"score": sum(scores) / len(scores), "accuracy": accuracy(records)}
        for task in sorted(by_task):
            metrics[f"score/{task}"] = sum(by_task[task]) / len(by_task[task])
        return metrics


def _image(row: Row, key: str) -> ImageSource:
    return release_image(text(row[key]), Path(row["_base"]), row.get("_zip"))


def _size(value: Any) -> int | None:
    return None if value is None or text(value) == "" else int(float(value))


def _answer_type(task: str, gold: str) -> AnswerType:
    """The nearest generic type (used by tools that do not know the task rules)."""
    if task == "jigsaw" or (task == "spot_difference" and not gold.isdigit()):
        return "list"
    if task == "ocr":
        return "text"
    if gold.isalpha() and gold.isupper():
        return "math"  # a bare letter: the options are in the prompt, not in Sample.options
    try:
        float(gold)
    except ValueError:
        return "text"
    return "number"


def _prompt_options(prompt: str) -> dict[str, str] | None:
    """Options written in the prompt ("A. x" / "A: x" lines, or inline "(A) x (B) y")."""
    _, options = split_options(prompt)
    if options:
        return options
    found = dict(_INLINE_OPTION.findall(prompt))
    letters = "".join(found)
    return found if len(found) >= 2 and "ABCDEFGHIJ".startswith(letters) else None
