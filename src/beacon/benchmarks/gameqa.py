"""GameQA (Code2Logic / Game-RL): questions about game screenshots generated from game code.

Checked against the official repo (tongjingqi/Game-RL @ 0d91d47: the 30 games' example
`data.json` files and `scripts/eval/eval_matrix.py`) and the hub file listing: the release
`OpenMOSS-Team/GameQA-140K` (formerly `Code2Logic/GameQA-140K`) holds `games_data.json` (train,
126,760 rows), `games_data_test.json` (test, 15,047 rows) and the images in
`games_images.zip` / `games_images_test.zip`. A row has `data_id`, `image` (a path such as
"images/board_00001.png"), `state`, `plot_level`, `qa_level` (Easy / Medium / Hard),
`qa_type` (Target Perception / State Prediction / Strategy Optimization), `question_id`,
`question_description`, `question` (options written inside it), `answer`, `analysis` and
`options` (a list, or null for fill-in questions). The answer convention varies by game: a
option number (int or digit string; 1-based, except Snake, whose questions list
"0: ..." first), an option letter, the option's own text
("yellow", "A. Pinky is ..."), or a fill-in value ("(5, 5)", "0.800", "Spade 2").
GameQA-Lite (`gsarch/Game-QA-Lite`, one parquet, 2,633 rows) is what other evaluators report;
its columns could not be inspected here and are assumed to be the same with `image` an image
struct. Which subset the Beacon paper scored is not stated, so both are registered: `gameqa`
(the test split) and `gameqa_lite`. Neither hub revision could be resolved to a full commit
(the hub pages show a6d7acc for GameQA-140K and 6c3a87f for the Lite data), so both read `main`.

`limit` draws a seeded random subset (the rows come grouped by game, so the first N would be
one game). The game is taken from a `game_name` / `game` column, else from the image path's
first folder when the path has one above `images/`; it prefixes the sample id.

Scoring. The official evaluator asks an LLM judge ("Correctness: Yes/No"), giving it the gold
as "The correct option is {n}: {option text}" for option numbers. Here rules decide first:
option numbers by the option text the answer is (first: Sokoban's options are coordinates and
numbers themselves), else the number it starts with; letters and option texts through
`beacon.verify`'s choice rule; coordinates by their integers; numbers and other text by
`beacon.verify`. The judge decides what the rules cannot read. Deviation: the
official evaluator shows the judge `options[answer - 1]`, which for Snake's 0-based numbers is
the wrong option (the last one for answer 0); the judge here sees the option the number names.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from beacon.benchmarks.base import Benchmark, Row, register
from beacon.benchmarks.grouped import accuracy
from beacon.benchmarks.options import LETTERS, format_options
from beacon.benchmarks.tables import (
    BadRow,
    ZipImages,
    image_source,
    literal_list,
    read_table,
    release_image,
    table_in,
    text,
)
from beacon.types import ImageSource, Sample
from beacon.verify import verify
from beacon.verify.coordinates import is_coordinate, verify_coordinates
from beacon.verify.option_number import verify_option_number

TEST_JSON = "games_data_test.json"
TEST_IMAGES = "games_images_test.zip"
QA_TYPES = ("Target Perception", "State Prediction", "Strategy Optimization")
_LETTER_PREFIX = re.compile(r"^\s*\(?([A-Z])\s*[\).:：]\s*(.*\S)?\s*$", re.S)
_ZERO_BASED = re.compile(r"(?m)^\s*0\s*[:.)]")  # options listed "0: ...", "1: ..." (Snake)


class GameQABase(Benchmark):
    categories = QA_TYPES
    sampled = True

    def to_sample(self, row: Row) -> Sample:
        missing = [key for key in ("question", "answer") if key not in row]
        if missing:
            seen = ", ".join(sorted(k for k in row if not k.startswith("_")))
            raise ValueError(
                f"{self.name}: rows lack {missing} (columns: {seen}); the loader expects the "
                "GameQA field names (see the module docstring)"
            )
        game = _game(row)
        data_id = text(row.get("data_id")) or str(row["_row"])
        image = _image(row)
        sample = Sample(
            id=f"{game}:{data_id}" if game else data_id,
            images=[image] if image is not None else [],
            question=text(row["question"]),
            answer="",
            metadata={
                "category": text(row.get("qa_type")) or None,
                "game": game,
                "qa_level": text(row.get("qa_level")) or None,
                "plot_level": text(row.get("plot_level")) or None,
                "question_id": text(row.get("question_id")) or None,
            },
        )
        return _with_gold(sample, row.get("answer"), _options(row.get("options")))

    def prompt(self, sample: Sample) -> str:
        """The question as published (its options are written in it), options added if not."""
        shown = sample.metadata.get("option_texts") or list((sample.options or {}).values())
        if not shown or all(option in sample.question for option in shown):
            return sample.question
        if sample.options:
            return f"{sample.question}\n{format_options(sample.options)}"
        base = sample.metadata.get("option_base", 1)
        numbered = "\n".join(f"{i}: {option}" for i, option in enumerate(shown, start=base))
        return f"{sample.question}\n{numbered}"

    def score(self, response: str, sample: Sample, *, judge: Any = None) -> Any:
        texts = sample.metadata.get("option_texts")
        if texts:
            base = sample.metadata.get("option_base", 1)
            return verify_option_number(response, sample, texts, base, judge)
        if sample.metadata.get("coordinate"):
            return verify_coordinates(response, sample, judge)
        return verify(response, sample, judge=judge)

    def record_meta(self, sample: Sample) -> dict[str, Any]:
        return {"game": sample.metadata.get("game"), "qa_level": sample.metadata.get("qa_level")}

    def aggregate(self, records: list[Mapping[str, Any]]) -> dict[str, float]:
        if not records:
            return {}
        metrics = {"accuracy": accuracy(records)}
        for key in ("qa_level", "game"):
            groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
            for record in records:
                value = (record.get("meta") or {}).get(key)
                if value is not None:
                    groups[value].append(record)
            for value in sorted(groups):
                metrics[f"{key}/{value}"] = accuracy(groups[value])
        return metrics


@register
class GameQA(GameQABase):
    name = "gameqa"
    description = "GameQA-140K test split: questions on game screenshots (30 games, 3 QA types)."
    hub = "OpenMOSS-Team/GameQA-140K"
    revision = "main"
    split = "test"
    hub_files: ClassVar[tuple[str, ...]] = (TEST_JSON, TEST_IMAGES)

    def read_hub(self) -> Iterable[Row]:
        return self.read_snapshot(self.hub_files)

    def read_local(self, path: Path) -> Iterator[Row]:
        """games_data_test.json (or the folder holding it) with the images unpacked or zipped."""
        file = table_in(path, [TEST_JSON])
        zipped = file.parent / TEST_IMAGES
        archive = ZipImages(zipped) if zipped.is_file() else None
        for row in read_table(file):
            yield {**row, "_base": file.parent, "_zip": archive}


@register
class GameQALite(GameQABase):
    name = "gameqa_lite"
    description = "GameQA-Lite: a 2,633-row GameQA evaluation set (option matching elsewhere)."
    hub = "gsarch/Game-QA-Lite"
    revision = "main"
    split = "train"


def _game(row: Row) -> str | None:
    named = text(row.get("game_name")) or text(row.get("game"))
    if named:
        return named
    cell = row.get("image")
    parts = Path(text(cell)).parts if isinstance(cell, str) else ()
    return parts[0] if len(parts) >= 3 else None


def _image(row: Row) -> ImageSource | None:
    cell = row.get("image")
    if not isinstance(cell, str):
        return image_source(cell)
    if not text(cell):
        return None
    return release_image(text(cell), Path(row.get("_base") or "."), row.get("_zip"))


def _options(value: Any) -> list[str]:
    """The option list as published: a list, or its text (`str(list)` or JSON) in some exports;
    other text is no option list. Text that opens a list but does not parse skips the row."""
    if isinstance(value, str) and value.strip().startswith("["):
        parsed = literal_list(value)
        if parsed is None:
            raise BadRow("bad_options", f"GameQA options {value[:80]!r} do not parse as a list")
        value = parsed
    if isinstance(value, str) or value is None:
        return []
    return [str(option) for option in value]


def _with_gold(sample: Sample, gold: Any, options: list[str]) -> Sample:
    """Sets answer, answer_type and options from the game's answer convention."""
    answer = text(gold)
    if not answer:
        raise ValueError(f"GameQA item {sample.id}: no answer")
    labelled = _letter_options(options)
    base = 0 if _ZERO_BASED.search(sample.question) else 1
    numbered = answer.isdigit() and base <= int(answer) < base + len(options)
    if options and labelled is None and numbered:
        sample.answer, sample.answer_type = answer, "number"
        sample.metadata["option_texts"] = options
        sample.metadata["option_base"] = base
        return sample
    letters = labelled or {LETTERS[i]: option for i, option in enumerate(options)}
    key = _gold_letter(answer, options, letters)
    if key is not None:
        sample.answer, sample.answer_type, sample.options = key, "choice", letters
        return sample
    sample.answer = answer
    bracketed = answer.startswith(("(", "["))
    sample.metadata["coordinate"] = bracketed and is_coordinate(answer)
    sample.answer_type = "text"
    return sample


def _letter_options(options: list[str]) -> dict[str, str] | None:
    """{"A": "6", ...} when every option is written "A: 6" / "A. 6" / "A.red", in order."""
    if not options:
        return None
    parsed = {}
    for index, option in enumerate(options):
        match = _LETTER_PREFIX.match(option)
        if match is None or index >= len(LETTERS) or match.group(1) != LETTERS[index]:
            return None
        parsed[match.group(1)] = (match.group(2) or "").strip()
    return parsed


def _gold_letter(answer: str, options: list[str], letters: Mapping[str, str]) -> str | None:
    """The option letter the gold names: a letter, an option's text, or a whole option line."""
    if answer.upper() in letters and len(answer) == 1:
        return answer.upper()
    for index, option in enumerate(options):
        if answer == option or answer == letters.get(LETTERS[index]):
            return LETTERS[index]
    return None
