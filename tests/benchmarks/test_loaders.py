"""Per-benchmark tests on real published rows (and hub-format files where no row is public)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from beacon.benchmarks import get_benchmark
from beacon.types import Sample

from .local_copies import BUILDERS, DATA, png, write_hf_parquet


def load(name: str, path: Path, **kwargs) -> list[Sample]:
    return list(get_benchmark(name).load(path=path, **kwargs))


def records(samples: list[Sample], wrong: set[str], k: int = 0, name: str = "") -> list[dict]:
    """Eval records (one mode) with `correct` false exactly for the ids in `wrong`."""
    bench = get_benchmark(name)
    return [
        {"sample_id": s.id, "k": k, "correct": s.id not in wrong, "meta": bench.record_meta(s)}
        for s in samples
    ]


# --- MathVista (real rows: lupantech/MathVista testmini.json) ---------------------------------


def test_mathvista_option_text_answers_become_letters() -> None:
    samples = {s.id: s for s in load("mathvista", DATA / "mathvista")}
    assert len(samples) == 20
    angle = samples["3"]
    assert angle.options == {"A": "135°", "B": "140°", "C": "145°", "D": "150°"}
    assert angle.answer == "C" and angle.metadata["original_answer"] == "145°"
    snowboard = samples["18"]  # option texts are whole sentences
    assert snowboard.options[snowboard.answer].endswith("when it does not have a layer of wax?")
    assert samples["1"].answer_type == "number" and samples["1"].metadata["precision"] == 1
    assert "1 decimal place" in get_benchmark("mathvista").prompt(samples["1"])
    assert "(Unit: g)" in samples["2"].question
    assert samples["1"].images == [DATA / "mathvista" / "images" / "1.jpg"]


def test_mathvista_scores_option_text_and_precision() -> None:
    bench = get_benchmark("mathvista")
    samples = {s.id: s for s in bench.load(path=DATA / "mathvista")}
    assert bench.score("<answer>C</answer>", samples["3"]).correct
    assert not bench.score("<answer>B</answer>", samples["3"]).correct
    assert bench.score("<answer>1.2</answer>", samples["1"]).correct
    assert not bench.score("<answer>1.3</answer>", samples["1"]).correct


# --- MathVerse (real rows re-labelled as vision-only, see data/README.md) --------------------


def test_mathverse_keeps_only_vision_only_rows() -> None:
    samples = load("mathverse", DATA / "mathverse")
    rows = json.loads((DATA / "mathverse" / "testmini.json").read_text())
    expected = [r["sample_index"] for r in rows if r["problem_version"] == "Vision Only"]
    assert [s.id for s in samples] == expected
    letter = next(s for s in samples if s.answer == "D")
    assert letter.options is None and letter.answer_type == "math"
    assert get_benchmark("mathverse").score("<answer>D</answer>", letter).correct
    assert not get_benchmark("mathverse").score("<answer>B</answer>", letter).correct


# --- HallusionBench (real rows: three complete groups) ---------------------------------------


def test_hallusionbench_string_ids_answers_and_images() -> None:
    samples = load("hallusionbench", DATA / "hallusionbench")
    assert len(samples) == 20 and len({s.id for s in samples}) == 20
    first = samples[0]
    assert first.id == "VS_chart_0_0_0" and first.answer == "no" and first.images == []
    assert samples[1].answer == "yes"
    with_figure = samples[4]
    assert with_figure.images == [DATA / "hallusionbench" / "VS" / "chart" / "0_1.png"]
    meta = get_benchmark("hallusionbench").record_meta(first)
    assert meta == {"question_group": "VS_chart_0_0", "figure_group": None}


def test_hallusionbench_aacc_facc_qacc_by_hand() -> None:
    samples = load("hallusionbench", DATA / "hallusionbench")
    # Wrong: a no-figure VS question (q1), VD set 0 figure 1 q2, VD set 1 figure 0 q0.
    wrong = {"VS_chart_0_0_1", "VD_illusion_0_1_2", "VD_illusion_1_0_0"}
    bench = get_benchmark("hallusionbench")
    metrics = bench.aggregate(records(samples, wrong, name="hallusionbench"))
    # aAcc: 17 of 20 questions.
    # qAcc: 10 question groups (VS q0-q3, VD set0 q0-q2, VD set1 q0-q2); VS q1, VD0 q2 and
    #       VD1 q0 each have a wrong member -> 7/10.
    # fAcc: 5 figures (VS figure 1; VD set0 fig 0/1; VD set1 fig 0/1; VS figure 0 has none);
    #       VD0 fig1 and VD1 fig0 fail -> 3/5 (the VS no-figure error does not count).
    assert metrics == pytest.approx({"aAcc": 17 / 20, "qAcc": 7 / 10, "fAcc": 3 / 5}, abs=1e-12)
    # A second sample index k=1, all right: each metric averages over (group, k) attempts.
    both = records(samples, wrong, name="hallusionbench") + records(
        samples, set(), k=1, name="hallusionbench"
    )
    assert bench.aggregate(both) == pytest.approx(
        {"aAcc": 37 / 40, "qAcc": 17 / 20, "fAcc": 8 / 10}, abs=1e-12
    )


# --- HR-Bench (hub layout: TSV and parquet with base64 images, four rotations) ---------------


def test_hrbench_tsv_and_parquet_read_the_same_rows(local_copy) -> None:
    folder = local_copy("hrbench_8k")
    from_tsv = load("hrbench_4k", folder / "hr_bench_4k.tsv")
    from_parquet = load("hrbench_8k", folder)  # the folder: finds hr_bench_8k.parquet
    assert [(s.question, s.options, s.answer) for s in from_tsv] == [
        (s.question, s.options, s.answer) for s in from_parquet
    ]
    assert all(isinstance(s.images[0], bytes) for s in from_tsv)
    assert from_tsv[0].images[0] == png((0, 90, 160))
    assert from_tsv[0].images == from_parquet[0].images


def test_hrbench_rotated_copies_share_a_group_and_the_gold_text(local_copy) -> None:
    samples = load("hrbench_4k", local_copy("hrbench_4k"))
    groups = [s.metadata["circular_group"] for s in samples]
    assert len(set(groups[:4])) == 1 and len(set(groups[4:])) == 1 and groups[0] != groups[4]
    assert {s.options[s.answer] for s in samples[:4]} == {"red"}
    assert [s.answer for s in samples[:4]] == ["A", "D", "C", "B"]


def test_hrbench_plain_and_strict_circular_accuracy_by_hand(local_copy) -> None:
    bench = get_benchmark("hrbench_4k")
    samples = list(bench.load(path=local_copy("hrbench_4k")))
    # Answer every copy right except the third rotation of the second question.
    graded = []
    for sample in samples:
        reply = "A" if sample.id == "6" and sample.answer != "A" else sample.answer
        verdict = bench.score(f"<answer>{reply}</answer>", sample)
        graded.append({"k": 0, "correct": verdict.correct, "meta": bench.record_meta(sample)})
    metrics = bench.aggregate(graded)
    # plain: 7 of 8 rows; strict circular: question 1 (4/4 right) counts, question 2 does not.
    assert metrics == {"accuracy": 7 / 8, "circular_accuracy": 1 / 2, "circular_groups": 2.0}


# --- ChartQA (real rows) ---------------------------------------------------------------------


def test_chartqa_relaxed_accuracy_on_real_rows() -> None:
    bench = get_benchmark("chartqa")
    samples = {s.id: s for s in bench.load(path=DATA / "chartqa")}
    assert len(samples) == 20 and samples["human_0"].metadata["category"] == "human"
    lamb_corn = samples["human_1"]  # gold "0.57"
    assert bench.score("<answer>0.59</answer>", lamb_corn).correct  # 3.5 % off
    assert not bench.score("<answer>0.6</answer>", lamb_corn).correct  # 5.3 % off
    year = samples["augmented_1"]  # gold "2013": years need an exact match
    assert bench.score("<answer>2013</answer>", year).correct
    assert not bench.score("<answer>2014</answer>", year).correct
    emotion = samples["human_8"]  # gold "Inspired"
    assert bench.score("<answer>inspired</answer>", emotion).correct
    assert samples["human_0"].images == [DATA / "chartqa" / "png" / "41699051005347.png"]


# --- ChartQA-Pro (real CSV export rows; hub-schema parquet with real lists) ------------------


def test_chartqapro_list_strings_from_the_csv_export() -> None:
    samples = {s.id: s for s in load("chartqapro", DATA / "chartqapro")}
    assert len(samples) == 20
    convo = samples["row_01070_439d835f4b63"]
    assert convo.answer == "48" and convo.metadata["turn_answers"] == ["Higher (PDO)", "48"]
    assert convo.answer_type == "number"
    pmi = samples["row_01251_98d9540b64ca"]  # Year ['NO', 'YES', 'NO']: the last flag counts
    assert pmi.metadata["year"] is False and pmi.answer == "Yes"
    choice = samples["row_01817_81cc9907f278"]  # options "a) ..." in the question, gold "A"
    assert choice.answer_type == "choice" and choice.options["A"] == "$19.8 billion"
    assert "Paragraph" not in convo.question
    assert samples["row_00150_318c66f77f67"].question.startswith("Among Catholics")


def test_chartqapro_hub_lists_conversation_and_list_gold(tmp_path: Path) -> None:
    columns = {
        "Question": [
            ["what is the top bar?", "how many bars are there?"],
            ["which bars are above 50? list them."],
            ["what share is online?\na) 10%\nb) 20%\nc) 30%"],
        ],
        "Answer": [["Mars", "6"], ["[Mars, Galaxy, Twirl]"], ["B"]],
        "Question Type": ["Conversational", "Factoid", "Multi Choice"],
        "Year": [["NO", "NO"], ["NO"], ["NO"]],
        "Paragraph": ["", "", ""],
        "image": [png(), png((1, 1, 1)), png((2, 2, 2))],
    }
    path = tmp_path / "test.parquet"
    pd.DataFrame(columns).to_parquet(path)
    bench = get_benchmark("chartqapro")
    convo, listed, choice = bench.load(path=path)
    assert convo.question == (
        "Question 1: what is the top bar?\nAnswer 1: Mars\nFinal question: how many bars are there?"
    )
    assert convo.answer == "6" and convo.images == [png()]
    assert listed.answer_type == "list"
    assert bench.score("<answer>[Mars, Galaxy, Twirl]</answer>", listed).correct
    assert not bench.score("<answer>[Mars, Twirl]</answer>", listed).correct
    assert choice.options == {"A": "10%", "B": "20%", "C": "30%"} and choice.answer == "B"


# --- MMStar (real VLMEvalKit result sheet) ---------------------------------------------------


def test_mmstar_options_parsed_from_both_question_styles() -> None:
    samples = {s.id: s for s in load("mmstar", DATA / "mmstar" / "llava_next_yi_34b_MMStar.xlsx")}
    assert len(samples) == 20 and all(len(s.options) == 4 for s in samples.values())
    inline = samples["0"]
    assert (
        inline.question == "Which option describe the object relationship in the image correctly?"
    )
    assert inline.options["A"] == "The suitcase is on the book."
    mathvista_style = samples["253"]
    assert mathvista_style.options == {"A": "40.7", "B": "74", "C": "70.4", "D": "70.0"}
    assert samples["1250"].metadata["source"] == "AI2D_TEST"


# --- V*, InfographicVQA, VisuLogic, AI2D (hub layouts) ---------------------------------------


def test_vstar_reads_annotation_and_strips_the_instruction(local_copy) -> None:
    samples = load("vstar", local_copy("vstar"))
    assert "Answer with the option" not in samples[0].question
    assert samples[0].metadata["annotation"]["target_object"] == ["glove"]
    assert samples[0].metadata["regions"] == [[10, 5, 18, 11]]  # from (x, y, w, h)
    assert samples[0].images[0].name == "sa_1.jpg" and samples[0].images[0].exists()


def test_infovqa_official_json_layout_and_anls_aggregate(tmp_path: Path) -> None:
    """The RRC release: infographicsvqa_qas/<json> beside infographicsvqa_images/."""
    (tmp_path / "infographicsvqa_images").mkdir()
    (tmp_path / "infographicsvqa_images" / "37313.jpeg").write_bytes(png())
    (tmp_path / "infographicsvqa_qas").mkdir()
    release = {
        "dataset_name": "infographicVQA",
        "data": [
            {
                "questionId": 65718,
                "question": "What % of users are on mobile?",
                "image_local_name": "37313.jpeg",
                "answers": ["56%", "56"],
                "answer_type": ["single span"],
            },
        ],
    }
    qas = tmp_path / "infographicsvqa_qas" / "infographicsVQA_val_v1.0_withQT.json"
    qas.write_text(json.dumps(release))
    bench = get_benchmark("infovqa")
    for path in (tmp_path, qas.parent, qas):
        (sample,) = bench.load(path=path)
        assert sample.id == "65718" and sample.metadata["answers"] == ["56%", "56"]
        assert sample.images == [tmp_path / "infographicsvqa_images" / "37313.jpeg"]
    assert bench.score("<answer>56</answer>", sample).correct
    assert bench.aggregate([{"score": 1.0}, {"score": 0.5}, {"score": 0.0}]) == {"anls": 0.5}


def test_visulogic_reads_images_from_the_zip(local_copy) -> None:
    samples = load("visulogic", local_copy("visulogic"))
    assert samples[0].images == [png()]
    assert samples[0].options == {"A": "1", "B": "2", "C": "3", "D": "4"}
    assert samples[1].options is None and samples[1].answer_type == "math"


def test_ai2d_answer_index_maps_to_letter(local_copy) -> None:
    samples = load("ai2d", local_copy("ai2d"))
    assert [s.answer for s in samples] == ["C", "A"]
    assert samples[1].options["A"] == "frog" and samples[1].images == [png((9, 9, 9))]


def test_treebench_options_from_text_and_evidence_boxes(local_copy) -> None:
    samples = load("treebench", local_copy("treebench"))
    assert samples[0].options == {"A": "STOP", "B": "EXIT", "C": "OPEN", "D": "SALE"}
    assert samples[0].metadata["target_instances"] == [{"name": "sign", "bbox": [1, 2, 3, 4]}]
    assert isinstance(samples[0].images[0], bytes)


def test_visualprobe_difficulty_comes_from_the_split(local_copy) -> None:
    for level in ("easy", "medium", "hard"):
        bench = get_benchmark(f"visualprobe_{level}")
        samples = list(bench.load(path=local_copy(f"visualprobe_{level}")))
        assert {s.metadata["difficulty"] for s in samples} == {level}
        assert samples[0].question == "What is the number on the bus?"


def test_hub_parquet_with_image_feature_stays_encoded(tmp_path: Path) -> None:
    path = write_hf_parquet(
        tmp_path / "mmstar.parquet",
        {
            "index": [7],
            "question": ["Color?\nOptions: A: red, B: blue"],
            "answer": ["B"],
            "category": ["coarse perception"],
            "l2_category": ["color"],
            "image": [png()],
        },
        "image",
    )
    (sample,) = load("mmstar", path)
    assert sample.images == [png()] and sample.options == {"A": "red", "B": "blue"}


def test_hub_branch_goes_through_load_dataset(tmp_path: Path, monkeypatch) -> None:
    """`load()` without a path calls datasets.load_dataset; here on a folder in hub layout."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    (tmp_path / "repo" / "data").mkdir(parents=True)
    BUILDERS["ai2d"](tmp_path / "repo" / "data")
    bench = get_benchmark("ai2d")
    bench.hub, bench.revision, bench.split = str(tmp_path / "repo"), None, "train"
    samples = list(bench.load())
    assert [s.answer for s in samples] == ["C", "A"]
    assert samples[0].images == [png()]  # the Image column stays encoded
