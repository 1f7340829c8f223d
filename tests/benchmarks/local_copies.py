"""Local copies of every benchmark in its published format, for the loader tests.

Real rows (tests/benchmarks/data, copied from /work/shared/benchmark-samples, see the README
there) are used as they are. Benchmarks with no real sample get small files written here in the
hub layout their module docstring describes: TSV / parquet with base64 images (HR-Bench,
TreeBench), parquet with `datasets` Image columns (AI2D, InfographicVQA, ChartQA-Pro, MMStar),
repo folders (V*, VisualProbe, VisuLogic with images.zip).
"""

from __future__ import annotations

import base64
import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import pandas as pd
from PIL import Image

DATA = Path(__file__).parent / "data"


def png(color: tuple[int, int, int] = (200, 30, 30), size: tuple[int, int] = (32, 24)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def b64png(seed: int) -> str:
    return base64.b64encode(png((seed * 40 % 256, 90, 160))).decode("ascii")


def write_hf_parquet(path: Path, columns: dict[str, list], image_column: str | None) -> Path:
    """A parquet file as `datasets` writes it, with a real Image feature column."""
    import datasets

    features = None
    if image_column is not None:
        dataset = datasets.Dataset.from_dict(columns)
        features = dataset.features.copy()
        features[image_column] = datasets.Image()
    dataset = datasets.Dataset.from_dict(columns, features=features)
    dataset.to_parquet(str(path))
    return path


HRBENCH_QUESTIONS = [
    ("What is the color of the umbrella?", ["red", "blue", "green", "black"], "single"),
    (
        "Which sign is closer to the bus?",
        ["stop sign", "speed sign", "no sign", "exit sign"],
        "cross",
    ),
]


def hrbench_rows() -> list[dict]:
    """Two questions x four rotations, gold first in the unrotated copy (as published)."""
    rows = []
    index = 0
    for number, (question, options, category) in enumerate(HRBENCH_QUESTIONS):
        for cycle in range(4):
            rotated = options[cycle:] + options[:cycle]
            row = {
                "index": index,
                "question": question,
                **dict(zip("ABCD", rotated, strict=True)),
                "answer": "ABCD"[rotated.index(options[0])],
                "category": category,
                "cycle_category": f"cycle{cycle + 1}",
                "image": b64png(number),
            }
            rows.append(row)
            index += 1
    return rows


def build_hrbench(tmp: Path) -> Path:
    frame = pd.DataFrame(hrbench_rows())
    frame.to_csv(tmp / "hr_bench_4k.tsv", sep="\t", index=False)
    frame.to_parquet(tmp / "hr_bench_8k.parquet")
    return tmp


def build_vstar(tmp: Path) -> Path:
    rows = [
        (
            "direct_attributes",
            "sa_1",
            "What is the color of the glove?",
            ["white", "black", "red", "blue"],
        ),
        (
            "direct_attributes",
            "sa_2",
            "What is the material of the cup?",
            ["glass", "paper", "metal", "wood"],
        ),
        (
            "relative_position",
            "sa_3",
            "Is the dog on the left or right of the cat?",
            ["left", "right"],
        ),
    ]
    lines = []
    for qid, (category, stem, question, options) in enumerate(rows):
        (tmp / category).mkdir(exist_ok=True)
        (tmp / category / f"{stem}.jpg").write_bytes(png())
        (tmp / category / f"{stem}.json").write_text(
            json.dumps({"target_object": ["glove"], "bbox": [[10, 5, 8, 6]]})
        )
        option_lines = "\n".join(f"({'ABCD'[i]}) {o}" for i, o in enumerate(options))
        instruction = "Answer with the option's letter from the given choices directly."
        text = f"{question}\n{option_lines}\n{instruction}"
        lines.append(
            {
                "image": f"{category}/{stem}.jpg",
                "text": text,
                "category": category,
                "question_id": qid,
                "label": "A",
            }
        )
    (tmp / "test_questions.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    return tmp


def build_treebench(tmp: Path) -> Path:
    frame = pd.DataFrame(
        {
            "index": [0, 1],
            "question": ["What is written on the red sign?", "How many cars are left of the tree?"],
            "multi-choice options": [
                "A. STOP\nB. EXIT\nC. OPEN\nD. SALE",
                "A. 1\nB. 2\nC. 3\nD. 4",
            ],
            "answer": ["A", "C"],
            "category": ["Perception/OCR", "Reasoning/Perspective Transform"],
            "target_instances": ['[{"name": "sign", "bbox": [1, 2, 3, 4]}]', "[]"],
            "image": [b64png(1), b64png(2)],
        }
    )
    frame.to_parquet(tmp / "treebench.parquet")
    return tmp / "treebench.parquet"


def build_visualprobe(tmp: Path) -> Path:
    (tmp / "data").mkdir(exist_ok=True)
    records = []
    for doc_id, (question, answer) in enumerate(
        [("What is the number on the bus?", "42"), ("What color is the kite?", "yellow")]
    ):
        (tmp / "data" / f"{doc_id}.jpg").write_bytes(png())
        records.append(
            {
                "doc_id": doc_id,
                # written relative to the folder above the repo, as the release does
                "images": str([f"VisualProbe_Easy/data/{doc_id}.jpg"]),
                "problem": f"<image>\n{question}",
                "solution": answer,
                "data_source": "visualprobe",
            }
        )
    (tmp / "val.json").write_text(json.dumps(records))
    return tmp


def build_visulogic(tmp: Path) -> Path:
    rows = [
        {
            "id": "00000",
            "question": "Which option completes the sequence?\nA: 1\nB: 2\nC: 3\nD: 4",
            "label": "B",
            "tag": "Quantitative Reasoning",
            "image_path": "images/00000.png",
        },
        {
            "id": "00001",
            "question": "Choose the figure that continues the pattern.",
            "label": "D",
            "tag": "Spatial Reasoning",
            "image_path": "images/00001.png",
        },
    ]
    with zipfile.ZipFile(tmp / "images.zip", "w") as archive:
        for row in rows:
            archive.writestr(row["image_path"], png())
    (tmp / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return tmp


def build_infovqa(tmp: Path) -> Path:
    columns = {
        "questionId": [98313, 98314],
        "question": ["What percentage of people use public transport?", "Which city is named?"],
        "answers": [["28%", "28"], ["New York", "new york city"]],
        "answer_type": [["single span"], ["single span"]],
        "image": [png(), png((1, 2, 3))],
    }
    return write_hf_parquet(tmp / "infovqa.parquet", columns, "image")


def build_ai2d(tmp: Path) -> Path:
    columns = {
        "question": ["Which label shows the sun?", "What eats the grasshopper?"],
        "options": [["A", "B", "C", "D"], ["frog", "grass", "sun", "deer"]],
        "answer": ["2", "0"],
        "image": [png(), png((9, 9, 9))],
    }
    return write_hf_parquet(tmp / "ai2d.parquet", columns, "image")


BUILDERS: dict[str, Callable[[Path], Path]] = {
    "synth": lambda tmp: None,
    "mathvista": lambda tmp: DATA / "mathvista",
    "mathverse": lambda tmp: DATA / "mathverse" / "testmini.json",
    "hallusionbench": lambda tmp: DATA / "hallusionbench",
    "chartqa": lambda tmp: DATA / "chartqa",
    "chartqapro": lambda tmp: DATA / "chartqapro" / "secondary_stratified_subset.csv",
    "mmstar": lambda tmp: DATA / "mmstar" / "llava_next_yi_34b_MMStar.xlsx",
    "hrbench_4k": lambda tmp: build_hrbench(tmp) / "hr_bench_4k.tsv",
    "hrbench_8k": lambda tmp: build_hrbench(tmp),
    "vstar": build_vstar,
    "treebench": build_treebench,
    "visualprobe_easy": build_visualprobe,
    "visualprobe_medium": build_visualprobe,
    "visualprobe_hard": build_visualprobe,
    "visulogic": build_visulogic,
    "infovqa": build_infovqa,
    "ai2d": build_ai2d,
}
