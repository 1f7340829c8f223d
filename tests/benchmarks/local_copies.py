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


BABYVISION_ROWS = [
    # (taskId, type, subtype, ansType, question, options, choiceAns, blankAns)
    (
        101,
        "Fine-grained Discrimination",
        "Find the same",
        "choice",
        "Which shadow matches the cat?",
        ["the first", "the second", "the third"],
        1,
        None,
    ),
    (
        445,
        "Fine-grained Discrimination",
        "Find the different",
        "blank",
        "49 tigers in 7 rows and 7 columns; one differs. Answer as (x,y).",
        [],
        None,
        "(4,7)",
    ),
    (
        638,
        "Fine-grained Discrimination",
        "Find the different",
        "blank",
        "Find the row and column of the odd letter. (Answer format: Row a Column b.)",
        [],
        None,
        "Row 4 Column 17",
    ),
    (
        212,
        "Spatial Perception",
        "Count 3D blocks",
        "blank",
        "How many blocks are in the picture?",
        [],
        None,
        "12",
    ),
    (
        330,
        "Visual Tracking",
        "Maze",
        "blank",
        "Which exit does the path from the star reach?",
        [],
        None,
        "left",
    ),
]


def babyvision_rows(image: Callable[[int], object]) -> list[dict]:
    """Rows with the release's field names; `image(task_id)` gives the image cell."""
    rows = []
    for task_id, type_, subtype, kind, question, options, choice, blank in BABYVISION_ROWS:
        rows.append(
            {
                "taskId": task_id,
                "question": question,
                "image": image(task_id),
                "options": options,
                "choiceAns": choice,
                "blankAns": blank,
                "ansType": kind,
                "type": type_,
                "subtype": subtype,
                "coT": "reasoning written by the annotators",
            }
        )
    return rows


def build_babyvision(tmp: Path) -> Path:
    """The hub layout: data/train-00000-of-00001.parquet with an Image column."""
    rows = babyvision_rows(lambda task_id: png((task_id % 256, 10, 10)))
    columns = {key: [row[key] for row in rows] for key in rows[0]}
    (tmp / "data").mkdir(parents=True, exist_ok=True)
    return write_hf_parquet(tmp / "data" / "train-00000-of-00001.parquet", columns, "image")


def build_babyvision_zip(tmp: Path) -> Path:
    """The GitHub release: babyvision_data.zip holding babyvision_data/meta_data.jsonl + images/."""
    rows = babyvision_rows(lambda task_id: f"images/{task_id}.png")
    path = tmp / "babyvision_data.zip"
    with zipfile.ZipFile(path, "w") as archive:
        lines = "\n".join(json.dumps(row) for row in rows) + "\n"
        archive.writestr("babyvision_data/meta_data.jsonl", lines)
        for task_id, *_ in BABYVISION_ROWS:
            archive.writestr(f"babyvision_data/images/{task_id}.png", png((task_id % 256, 10, 10)))
    return path


TIRBENCH_ROWS = [
    {
        "meta_data": {},
        "task": "refcoco",
        "answer": "A",
        "prompt": "Which value is closest to the proportion of the image occupied by man?\n"
        "A: 65%\nB: 73%\nC: 81%\nD: 89%",
        "image_1": "data/refcoco/COCO_1.jpg",
        "image_2": None,
        "id": 1,
    },
    {
        "meta_data": {"difficulty": 3},
        "task": "jigsaw",
        "answer": "[4, 1, 8, 9, 3, 6, 2, 7, 5]",
        "prompt": "The image has been divided into 3x3 pieces and scrambled. In what order "
        "should the numbered pieces be arranged?",
        "image_1": "data/jigsaw/shuffled_puzzle_3.jpg",
        "image_2": None,
        "id": 8,
    },
    {
        "meta_data": {},
        "task": "spot_difference",
        "answer": "7, 11, 12, 13, 14, 15, 19",
        "prompt": "Output the list of patch indices where the two images differ. Note that in "
        "this image, n is 4 and m is 5",
        "image_1": "data/spot_difference/79_left.png",
        "image_2": "data/spot_difference/79_right.png",
        "id": 11,
    },
    {
        "meta_data": {},
        "task": "ocr",
        "answer": "Hello",
        "prompt": "What is written in the image?",
        "image_1": "data/ocr/5.jpg",
        "image_2": None,
        "id": 20,
    },
    {
        "meta_data": {},
        "task": "symbolic",
        "answer": "CD",
        "prompt": "Which pairs of lines are parallel?\nA.ab and cd\nB.ef and gh\nC.ab and gh\n"
        "D.ef and cd\nE.none of the above\nSelect more than one option, such as ABC.",
        "image_1": "data/symbolic/3.png",
        "image_2": None,
        "id": 30,
    },
    {
        "meta_data": {},
        "task": "rotation_game",
        "answer": "90",
        "prompt": "How many degrees should you rotate this image CLOCKWISE to restore it?",
        "image_1": "data/rotation_game/2.png",
        "image_2": None,
        "id": 40,
    },
    {
        "meta_data": {},
        "task": "color",
        "answer": "0.6",
        "prompt": "What is the fraction of females facing the camera?",
        "image_1": "data/color/7.png",
        "image_2": None,
        "id": 50,
    },
    {
        "meta_data": {},
        "task": "word_search",
        "answer": "3, 5",
        "prompt": "In the figure, in which row and column does the number 8 appear?",
        "image_1": "data/word_search/9.png",
        "image_2": None,
        "id": 60,
    },
    {
        "meta_data": {},
        "task": "color",
        "answer": "B",
        "prompt": "What is closest to the proportion of the color green in the image? Select "
        "from the following choices. (A) 9% (B) 13% (C) 17% (D) 21%",
        "image_1": "data/color/8.png",
        "image_2": None,
        "id": 70,
    },
]


def build_tirbench(tmp: Path, *, unpacked: bool = False) -> Path:
    """The hub repo: TIR-Bench.json (a JSON array) beside data.zip (or its unpacked data/)."""
    tmp.mkdir(parents=True, exist_ok=True)
    names = [row[key] for row in TIRBENCH_ROWS for key in ("image_1", "image_2") if row[key]]
    if unpacked:
        for index, name in enumerate(names):
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_bytes(png((index, 0, 0)))
    else:
        with zipfile.ZipFile(tmp / "data.zip", "w") as archive:
            for index, name in enumerate(names):
                archive.writestr(name, png((index, 0, 0)))
    (tmp / "TIR-Bench.json").write_text(json.dumps(TIRBENCH_ROWS, ensure_ascii=False))
    return tmp


GAMEQA_ROWS = [
    # option number (int), options listed in the question as "n: text"
    {
        "qa_type": "State Prediction",
        "question_description": "path_finding",
        "question_id": 0,
        "data_id": "path-mcq-00001-path_finding",
        "image": "images/path-mcq-00001.png",
        "state": "states/path-mcq-00001.json",
        "plot_level": "Medium",
        "qa_level": "Hard",
        "question": "Which branch choices lead to the goal?\n\nOptions:\n"
        "1: 1-right-forward, 2-up\n2: 1-left-forward, 2-up\n3: 1-right-forward, 2-right-forward",
        "answer": 3,
        "options": [
            "1-right-forward, 2-up",
            "1-left-forward, 2-up",
            "1-right-forward, 2-right-forward",
        ],
        "analysis": "From the start point ...",
    },
    # option letter, options written "A: 6"
    {
        "qa_type": "State Prediction",
        "question_description": "stable_iterations",
        "question_id": 2,
        "data_id": "lifegame-00004",
        "image": "images/board_00004.png",
        "state": "states/board_00004.json",
        "plot_level": "Easy",
        "qa_level": "Medium",
        "question": "How many iterations until the region is stable?\n\nOptions:\nA: 6\nB: 2\n"
        "C: 0\nD: 8",
        "answer": "C",
        "options": ["A: 6", "B: 2", "C: 0", "D: 8"],
        "analysis": "The region is already stable ...",
    },
    # the option's own text as gold
    {
        "qa_type": "Target Perception",
        "question_description": "next_color",
        "question_id": 1,
        "data_id": "zuma-00002",
        "image": "images/zuma_00002.png",
        "state": "states/zuma_00002.json",
        "plot_level": "Easy",
        "qa_level": "Easy",
        "question": "What color is the marble the frog shoots next? Answer in one of the following "
        "formats: 'red', 'yellow', 'blue', or 'green'.",
        "answer": "yellow",
        "options": ["red", "yellow", "blue", "green"],
        "analysis": "The marble in the frog's mouth is yellow.",
    },
    # fill-in coordinate
    {
        "qa_type": "Target Perception",
        "question_description": "last_star",
        "question_id": 3,
        "data_id": "star-battle-00007",
        "image": "images/board_last_star_Easy_00007.png",
        "state": "states/board_last_star_Easy_00007.json",
        "plot_level": "Easy",
        "qa_level": "Easy",
        "question": "Where must the last star go? Answer as (row, column).",
        "answer": "(1, 3)",
        "options": None,
        "analysis": "Row 1 lacks a star ...",
    },
    # fill-in number
    {
        "qa_type": "Strategy Optimization",
        "question_description": "max_lines",
        "question_id": 4,
        "data_id": "tetris-00028",
        "image": "images/tetris-00028.png",
        "state": "states/tetris-00028.json",
        "plot_level": "Hard",
        "qa_level": "Medium",
        "question": "How many lines can be cleared at most with the next piece?",
        "answer": 2,
        "options": None,
        "analysis": "Dropping the I piece ...",
    },
    # fill-in text
    {
        "qa_type": "Target Perception",
        "question_description": "card_at",
        "question_id": 5,
        "data_id": "spider-00011",
        "image": "images/spider_00011.png",
        "state": "states/spider_00011.json",
        "plot_level": "Medium",
        "qa_level": "Easy",
        "question": "Which card is at the bottom of pile 3?",
        "answer": "Spade 2",
        "options": None,
        "analysis": "Pile 3 ends with ...",
    },
]


def build_gameqa(tmp: Path, *, copies: int = 1) -> Path:
    """games_data_test.json (a JSON list) beside games_images_test.zip; `copies` repeats the
    rows under new data_ids, for the seeded-subset tests."""
    rows = []
    for copy in range(copies):
        for row in GAMEQA_ROWS:
            suffix = f"-{copy}" if copies > 1 else ""
            rows.append({**row, "data_id": row["data_id"] + suffix})
    tmp.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(tmp / "games_images_test.zip", "w") as archive:
        for index, row in enumerate(GAMEQA_ROWS):
            archive.writestr(row["image"], png((index, 1, 1)))
    (tmp / "games_data_test.json").write_text(json.dumps(rows, indent=4))
    return tmp


def build_gameqa_lite(tmp: Path) -> Path:
    """A parquet in the GameQA field names with an Image column (the Lite columns are assumed)."""
    rows = [{**row, "answer": str(row["answer"])} for row in GAMEQA_ROWS]
    columns = {key: [row[key] for row in rows] for key in rows[0]}
    columns["options"] = [row["options"] or [] for row in rows]
    columns["image"] = [png((index, 2, 2)) for index in range(len(rows))]
    return write_hf_parquet(tmp / "train-00000-of-00001.parquet", columns, "image")


BUILDERS: dict[str, Callable[[Path], Path]] = {
    "synth": lambda tmp: None,
    "synth_demo": lambda tmp: None,
    "synth_demo_hinted": lambda tmp: None,
    "synth_demo_rl": lambda tmp: None,
    "synth_keys": lambda tmp: None,
    "synth_keys_marked": lambda tmp: None,
    "synth_keys_keyed": lambda tmp: None,
    "synth_keys_keyed_hinted": lambda tmp: None,
    "synth_keys_told": lambda tmp: None,
    "synth_keys_rl": lambda tmp: None,
    "synth_keys_opd": lambda tmp: None,
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
    "babyvision": build_babyvision,
    "tirbench": build_tirbench,
    "gameqa": build_gameqa,
    "gameqa_lite": build_gameqa_lite,
    "infovqa": build_infovqa,
    "ai2d": build_ai2d,
}
