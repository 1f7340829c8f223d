"""ChartQA-Pro (ahmed-masry/ChartQAPro, 1,948 items): diverse charts, five question types.

Confirmed: the official scorer (`vis-nlp/ChartQAPro` evaluate_predictions.py) and the column
names of a third-party CSV export of the hub rows: `Question`, `Answer`, `Question Type`
(Factoid, Multi Choice, Conversational, Fact Checking, Hypothetical), `Year`, `Paragraph`.
On the hub `Answer` and `Year` are lists (one entry per conversation turn) and `image` is raw
bytes; in CSV exports they are Python-list strings ("['Higher (PDO)', '48']"), both are read.
Assumed: on the hub a conversational `Question` is a list of turns (the export flattens it to
"Turn 1: ...\\nFinal question: ..."; a string is used as it is).

Scoring follows the official scorer: the gold is the last answer; a "[a, b]" gold is a list
scored element-wise; a `Year` flag of YES means exact match (`metadata["year"]`); numbers
are right within 5 % (`relaxed_tol`); other text reports ANLS (threshold 0.5) as the score.
Deviation: the official script computes an exact-match switch for Fact Checking and Multi
Choice but never passes it on (so those use ANLS); here they are scored exactly, as the paper
describes, with options parsed for Multi Choice. Conversational prompts show the earlier
turns with their answers.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from beacon.benchmarks.base import Benchmark, Row, register
from beacon.benchmarks.chartqa import RELAXED_TOL, is_number
from beacon.benchmarks.options import split_options
from beacon.benchmarks.tables import image_source, literal_list, read_table, text
from beacon.types import AnswerType, Sample

EXACT_TYPES = ("Fact Checking", "Multi Choice")
QUESTION_TYPES = ("Factoid", "Multi Choice", "Conversational", "Fact Checking", "Hypothetical")


@register
class ChartQAPro(Benchmark):
    name = "chartqapro"
    description = "ChartQA-Pro: factoid, multi-choice, conversational, fact-checking questions."
    hub = "ahmed-masry/ChartQAPro"
    revision = "main"
    split = "test"
    categories = QUESTION_TYPES

    def read_local(self, path: Path) -> Iterable[Row]:
        return read_table(path)

    def to_sample(self, row: Row) -> Sample:
        turns = as_list(row["Question"])
        answers = as_list(row["Answer"])
        years = as_list(row.get("Year"))
        kind = text(row.get("Question Type"))
        if not answers:
            raise ValueError(f"ChartQA-Pro row {row['_row']}: empty Answer")
        gold = answers[-1].strip().strip(".").strip()
        question = _conversation(turns, answers)
        options = None
        if kind == "Multi Choice":
            question, options = _lettered(question)
        year = bool(years) and years[-1].strip().upper() == "YES"
        image = image_source(row.get("image"))
        return Sample(
            id=text(row.get("sample_id")) or str(row.get("row_index") or row["_row"]),
            images=[image] if image is not None else [],
            question=_with_paragraph(question, text(row.get("Paragraph"))),
            answer=gold,
            answer_type=_answer_type(gold, options),
            options=options,
            metadata={
                "category": kind or None,
                "turn_answers": answers,
                "year": year,
                "relaxed_tol": RELAXED_TOL,
                "anls": kind not in EXACT_TYPES and not year,
            },
        )


def as_list(value: Any) -> list[str]:
    """A list cell: a real list (hub), a Python-list string (CSV export) or one string."""
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    cell = text(value)
    parsed = literal_list(cell)
    if parsed is not None:
        return [str(v) for v in parsed]
    return [cell] if cell else []


def _conversation(turns: list[str], answers: list[str]) -> str:
    """Earlier turns with their answers, then the final question."""
    if len(turns) <= 1:
        return turns[0].strip() if turns else ""
    lines = []
    for number, (turn, answer) in enumerate(zip(turns[:-1], answers[:-1], strict=False), 1):
        lines.append(f"Question {number}: {turn.strip()}\nAnswer {number}: {answer}")
    lines.append(f"Final question: {turns[-1].strip()}")
    return "\n".join(lines)


def _lettered(question: str) -> tuple[str, dict[str, str] | None]:
    stem, options = split_options(question)
    return (stem, options) if options else (question, None)


def _with_paragraph(question: str, paragraph: str) -> str:
    return f"{paragraph}\n\n{question}" if paragraph else question


def _answer_type(gold: str, options: dict[str, str] | None) -> AnswerType:
    if options and len(gold) == 1 and gold.upper() in options:
        return "choice"
    if gold.startswith("[") and gold.endswith("]"):
        return "list"
    if is_number(gold):
        return "number"
    return "text"
