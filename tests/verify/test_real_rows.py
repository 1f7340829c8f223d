"""The scorers against real benchmark rows (tests/verify/data/real_rows.json).

The rows are copied from /work/shared/benchmark-samples (see its README for sources and
licences), keeping only the fields a scorer reads. Expected verdicts are worked out by hand in
the comments, from the rules in docs/verify.md.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from string import ascii_uppercase

import pytest

from beacon.types import Sample
from beacon.verify import verify

ROWS = json.loads((Path(__file__).parent / "data" / "real_rows.json").read_text("utf-8"))


def _sample(answer: str, answer_type: str, **kwargs: object) -> Sample:
    return Sample(id="r", images=[], question="q", answer=answer, answer_type=answer_type, **kwargs)


# ---- MathVista testmini: choice answers are option TEXT; numbers carry `precision`. ----


def _mathvista_sample(row: dict) -> Sample:
    if row["question_type"] == "multi_choice":
        options = dict(zip(ascii_uppercase, row["choices"], strict=False))
        return _sample(row["answer"], "choice", options=options)
    meta = {"precision": row["precision"]} if row["precision"] is not None else {}
    return _sample(row["answer"], "number", metadata=meta)


@pytest.mark.parametrize("row", ROWS["mathvista"], ids=lambda r: f"pid{r['pid']}")
def test_mathvista_rows(row: dict) -> None:
    sample = _mathvista_sample(row)
    if sample.options:
        gold = next(k for k, v in sample.options.items() if v == row["answer"])
        other = next(k for k in sample.options if k != gold)
        assert verify(f"<answer>{row['answer']}</answer>", sample).prediction == gold
        assert verify(f"<answer>{row['answer']}</answer>", sample).correct
        assert verify(f"Looking closely...\nThe answer is ({gold}).", sample).correct
        assert not verify(f"<answer>{other}</answer>", sample).correct
    else:
        unit = f" {row['unit']}" if row["unit"] else ""
        assert verify(f"<answer>{row['answer']}{unit}</answer>", sample).correct
        wrong = float(row["answer"]) + 1
        assert not verify(f"The answer is {wrong}.", sample).correct


def test_mathvista_precision_row() -> None:
    row = ROWS["mathvista"][0]  # pid 1: float answer "1.2", precision 1
    assert (row["answer"], row["precision"]) == ("1.2", 1)
    sample = _mathvista_sample(row)
    assert verify("<answer>1.23</answer>", sample).correct
    assert not verify("<answer>1.26</answer>", sample).correct  # rounds to 1.3


# ---- MathVerse: multi-choice golds are LETTERS, options live in the question. ----


def _mathverse_options(question: str) -> dict[str, str]:
    block = question.split("Choices:")[-1]
    return dict(re.findall(r"^([A-D]):(.*)$", block, flags=re.M))


@pytest.mark.parametrize(
    "row",
    [r for r in ROWS["mathverse"] if r["question_type"] == "multi-choice"],
    ids=lambda r: r["sample_index"],
)
def test_mathverse_choice_rows(row: dict) -> None:
    options = _mathverse_options(row["question"])
    assert set(options) == {"A", "B", "C", "D"}
    sample = _sample(row["answer"], "choice", options=options)
    gold_text = options[row["answer"]]
    assert verify(f"So angle is {gold_text}.\n<answer>{gold_text}</answer>", sample).correct
    assert verify(f"Answer: {row['answer']}", sample).correct
    # The same gold as a bare letter without options (math type): read as a letter.
    assert verify(f"Answer: {row['answer']}", _sample(row["answer"], "math")).correct


MATHVERSE_FREE_FORM = {
    # gold: (a right response, a wrong response)
    "11.8": ("<answer>d ≈ 11.79</answer>", "<answer>11.9</answer>"),
    "22.3": ("\\boxed{22.3}", "\\boxed{22.5}"),
    "2191.7 metres": (
        "The total is 2191.7 m.\n<answer>2191.7 metres</answer>",
        "<answer>2191</answer>",
    ),
    "S 23.5 ^\\circ W": ("<answer>S 23.5° W</answer>", "<answer>N 23.5° E</answer>"),
    "315^\\circT": ("<answer>315° T</answer>", "<answer>45° T</answer>"),
    "230 ^\\circ T": ("<answer>230^{\\circ} T</answer>", "<answer>310° T</answer>"),
    "217 ^\\circ T": ("\\boxed{217^\\circ T}", "\\boxed{143^\\circ T}"),
    "212°T": ("<answer>212°T</answer>", "<answer>122°T</answer>"),
    "329° T": ("<answer>329 degrees T</answer>", "<answer>331° T</answer>"),
}


@pytest.mark.parametrize(
    "row",
    [r for r in ROWS["mathverse"] if r["answer"] in MATHVERSE_FREE_FORM],
    ids=lambda r: r["sample_index"],
)
def test_mathverse_free_form_rows(row: dict) -> None:
    right, wrong = MATHVERSE_FREE_FORM[row["answer"]]
    sample = _sample(row["answer"], "math")
    assert verify(right, sample).correct
    assert not verify(wrong, sample).correct


def test_mathverse_model_outputs() -> None:
    # Five versions of problem 685 (gold 14): the first four end "... is 14 cm." / "14" /
    # "Final answer: 14"; the Vision Only answer ends "... is 13 cm.".
    rows = ROWS["mathverse_outputs"]
    verdicts = [verify(r["model_answer"], _sample(r["answer"], "math")).correct for r in rows]
    assert verdicts == [True, True, True, True, False]


# ---- HallusionBench: gt_answer "1"/"0", free-text yes/no predictions. ----


def test_hallusionbench_predictions() -> None:
    def key(r: dict) -> tuple:
        return (r["subcategory"], r["set_id"], r["figure_id"], r["question_id"])

    gold = {key(r): r["gt_answer"] for r in ROWS["hallusionbench"]}
    verdicts = [
        verify(p["model_prediction"], _sample(gold[key(p)], "yesno")).correct
        for p in ROWS["hallusionbench_predictions"]
    ]
    # By the first word of each prediction against gt_answer, in file order:
    # set 0 fig 0: Yes/1, No/0, Yes/0; set 0 fig 1: Yes/0, Yes/1, No/0;
    # set 1 fig 0: No/0, No/0, Yes/1; set 1 fig 1: No/0, No/1, Yes/0.
    assert verdicts == [True, True, False, False, True, True, True, True, True, True, False, False]


# ---- ChartQA: string labels, 5% relaxed accuracy, years exact. ----

CHARTQA_CASES = [
    ("14", "There are 14 food items.", True),
    ("0.57", "<answer>0.59</answer>", True),  # 3.5 % off
    ("0.57", "<answer>0.6</answer>", False),  # 5.3 % off
    ("3", "3", True),
    ("No", "No, Madagascar's sum is smaller.", True),
    ("62", "<answer>62%</answer>", True),
    ("Yes", "<answer>No</answer>", False),
    ("Inspired", "<answer>inspired</answer>", True),
    ("0.03", "The answer is 3%.", True),  # a percent may be read as value / 100
    ("47", "<answer>48</answer>", True),  # 2.1 % off
    ("2013", "<answer>2012</answer>", False),  # years are exact
    ("2011", "In 2011.", True),
    ("80.2", "<answer>80</answer>", True),
    ("72.3", "<answer>76</answer>", False),  # 5.1 % off
]


@pytest.mark.parametrize(("label", "response", "expected"), CHARTQA_CASES)
def test_chartqa_labels(label: str, response: str, expected: bool) -> None:
    labels = {r["label"] for r in ROWS["chartqa_human"] + ROWS["chartqa_augmented"]}
    assert label in labels
    sample = _sample(label, "text", metadata={"relaxed_tol": 0.05})
    assert verify(response, sample).correct is expected


# ---- ChartQA-Pro: list answers (the last turn is scored), Year flags, letters. ----


def _chartqapro_sample(entry: dict) -> Sample:
    gold, year = entry["Answer"][-1], entry["Year"][-1] == "YES"
    if entry["Question Type"] == "Multi Choice":
        options = {letter: f"option {letter.lower()}" for letter in "ABCD"}
        return _sample(gold, "choice", options=options)
    return _sample(gold, "text", metadata={"relaxed_tol": 0.05, "year": year})


def test_chartqapro_predictions() -> None:
    verdicts = [
        verify(e["prediction"], _chartqapro_sample(e)).correct
        for e in ROWS["chartqapro_predictions"]
    ]
    expected = [
        False,  # 299 vs 59
        False,  # B vs a
        False,  # 82.9 vs [94.7]
        True,  # C vs c
        True,  # True vs true (yes/no)
        False,  # 04/25 vs 5/3 (not a plain number: text)
        False,  # 10% vs -30
        False,  # Unanswerable vs true
        False,  # Unanswerable vs 0.3
        True,  # 20.2% vs 20.2%
        False,  # Lower vs Higher
        False,  # 2009 vs 2013 (Year flag: exact)
        False,  # Apr vs April (exact match; the judge may rescue it)
        True,  # 2019 vs 2019
        True,  # ... Microsoft vs Microsoft
        False,  # ... 9 vs 8 (11 % off)
        True,  # 15.45 vs [15.15] (1.9 % off)
        False,  # Unanswerable vs 50 Gt CO2e
        False,  # −246 vs -190
        True,  # 28.2 million vs [28.2] (magnitude words are units)
    ]
    assert verdicts == expected


def test_chartqapro_multi_choice_rows() -> None:
    rows = [r for r in ROWS["chartqapro_rows"] if r["Question Type"] == "Multi Choice"]
    for row in rows:
        options = {
            k.upper(): v.strip() for k, v in re.findall(r"^([a-d])\) (.*)$", row["Question"], re.M)
        }
        gold = eval_list(row["Answer"])[-1]
        sample = _sample(gold, "choice", options=options)
        if gold in options:
            assert verify(f"<answer>{gold.lower()}) {options[gold]}</answer>", sample).correct
            assert verify(f"<answer>{options[gold]}</answer>", sample).correct
        else:  # "Unanswerable" is not an option: compared as text
            assert verify("<answer>Unanswerable</answer>", sample).correct
            assert not verify("<answer>a</answer>", sample).correct


def eval_list(text: str) -> list[str]:
    return re.findall(r"'((?:[^'\\]|\\.)*)'", text)


# ---- MMStar: letter golds, options inside the question, the model's letter in `prediction`. ----


def _mmstar_options(question: str) -> dict[str, str]:
    if "\nOptions:" in question:
        block = question.split("\nOptions:", 1)[1]
        parts = re.split(r"(?:^|,)\s*([A-D]): ", block)
        return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}
    return dict(re.findall(r"^\(([A-D])\) (.*)$", question, flags=re.M))


@pytest.mark.parametrize("row", ROWS["mmstar"], ids=lambda r: str(r["index"]))
def test_mmstar_rows(row: dict) -> None:
    options = _mmstar_options(row["question"])
    assert set(options) == {"A", "B", "C", "D"}, options
    sample = _sample(row["answer"], "choice", options=options)
    # Predictions are letters, except row 751: "A: Manage human resources operations ...".
    letter = row["prediction"][0]
    expected = letter == row["answer"]
    assert verify(row["prediction"], sample).prediction == letter
    assert verify(row["prediction"], sample).correct is expected
    assert verify(f"The answer is {row['prediction']}.", sample).correct is expected
    assert verify(f"<answer>{options[letter]}</answer>", sample).prediction == letter
