"""Layouts of the real releases that the first loaders got wrong (issue 7 §6).

Each test writes the published layout: VisualProbe's repo-relative image paths, InfographicVQA
and AI2D as folders of parquet shards, V* without a gold, TreeBench rows without options and
with Python-literal boxes, VisuLogic's "./" image paths, MathVerse numeric golds.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from beacon.benchmarks import get_benchmark
from beacon.types import Sample

from .local_copies import build_visualprobe, build_vstar, png, write_hf_parquet


def load(name: str, path: Path) -> list[Sample]:
    return list(get_benchmark(name).load(path=path))


def test_visualprobe_paths_relative_to_the_folder_above_the_repo(tmp_path: Path) -> None:
    repo = build_visualprobe(tmp_path)
    rows = json.loads((repo / "val.json").read_text())
    assert rows[0]["images"].startswith("['VisualProbe_Easy/data/")
    for sample in load("visualprobe_easy", repo):
        (image,) = sample.images
        assert image.is_file() and image.parent == repo / "data"


def test_infovqa_folder_of_hub_shards_reads_only_the_validation_split(tmp_path: Path) -> None:
    def shard(name: str, ids: list[int]) -> None:
        columns = {
            "questionId": ids,
            "question": [f"q{i}" for i in ids],
            "answers": [[f"a{i}"] for i in ids],
            "answer_type": [["single span"] for _ in ids],
            "image": [png() for _ in ids],
        }
        write_hf_parquet(tmp_path / name, columns, "image")

    shard("validation-00000-of-00002.parquet", [1, 2])
    shard("validation-00001-of-00002.parquet", [3])
    shard("test-00000-of-00001.parquet", [9])
    samples = load("infovqa", tmp_path)
    assert [s.id for s in samples] == ["1", "2", "3"]
    assert samples[2].images == [png()]


def test_ai2d_folder_of_shards(tmp_path: Path) -> None:
    for index, answer in enumerate(["0", "1"]):
        columns = {
            "question": [f"question {index}"],
            "options": [["sun", "moon"]],
            "answer": [answer],
            "image": [png()],
        }
        write_hf_parquet(tmp_path / f"test-0000{index}-of-00002.parquet", columns, "image")
    assert [s.answer for s in load("ai2d", tmp_path)] == ["A", "B"]


def test_vstar_missing_gold_is_an_error_not_a(tmp_path: Path) -> None:
    repo = build_vstar(tmp_path)
    rows = [json.loads(line) for line in (repo / "test_questions.jsonl").read_text().splitlines()]
    del rows[1]["label"]
    (repo / "test_questions.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(ValueError, match="label"):
        load("vstar", repo)


def test_treebench_row_without_options_and_literal_boxes(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "index": ["0", "1"],
            "question": ["Which sign is red?\nA. stop\nB. exit", "Read the plate."],
            "multi-choice options": ["A. stop\nB. exit", ""],
            "answer": ["A", "B"],
            "category": ["Perception/OCR", "Perception/OCR"],
            "target_instances": ["[{'name': 'sign', 'bbox': [1, 2, 3, 4]}]", "nan"],
            "image": ["", ""],
        }
    )
    frame.to_csv(tmp_path / "treebench.tsv", sep="\t", index=False)
    first, second = load("treebench", tmp_path / "treebench.tsv")
    assert first.metadata["target_instances"] == [{"name": "sign", "bbox": [1, 2, 3, 4]}]
    assert second.options is None and second.answer_type == "math"
    bench = get_benchmark("treebench")
    assert bench.score("<answer>B</answer>", second).correct
    assert not bench.score("<answer>A</answer>", second).correct


@pytest.mark.parametrize("zipped", [True, False])
def test_visulogic_leading_dot_slash_in_image_paths(tmp_path: Path, zipped: bool) -> None:
    row = {"id": "00000", "question": "Q?\nA: 1\nB: 2", "label": "B", "tag": "Other"}
    row["image_path"] = "./images/00000.png"
    if zipped:
        with zipfile.ZipFile(tmp_path / "images.zip", "w") as archive:
            archive.writestr("images/00000.png", png())
    else:
        (tmp_path / "images").mkdir()
        (tmp_path / "images" / "00000.png").write_bytes(png())
    (tmp_path / "data.jsonl").write_text(json.dumps(row) + "\n")
    (sample,) = load("visulogic", tmp_path)
    image = sample.images[0]
    assert image == png() if zipped else image == tmp_path / "images" / "00000.png"
    assert sample.answer == "B"


def test_mathverse_numeric_gold_decided_by_the_golds_precision(tmp_path: Path) -> None:
    row = {
        "sample_index": "7",
        "problem_index": "7",
        "problem_version": "Vision Only",
        "question": "",
        "image": "images_version_6/image_7.png",
        "answer": "11.8",
        "question_type": "free-form",
        "metadata": {"subject": "Plane Geometry"},
    }
    (tmp_path / "testmini.json").write_text(
        json.dumps([row, {**row, "sample_index": "8", "answer": "11.79"}])
    )
    coarse, fine = load("mathverse", tmp_path)
    assert coarse.answer_type == "math" and fine.answer_type == "math"
    bench = get_benchmark("mathverse")
    assert bench.score("<answer>11.79</answer>", coarse).correct
    assert not bench.score("<answer>11.8</answer>", fine).correct
    assert bench.score("<answer>11.79</answer>", fine).correct
