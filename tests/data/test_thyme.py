"""Thyme SFT rows (the README's and ms-swift's shapes) become role-tagged text trajectories."""

from __future__ import annotations

import json
import os

import pytest
from PIL import Image
from tests.hostile import make_dev_zero, make_fifo

from beacon.data.thyme import import_thyme
from beacon.images import ImageStore, image_key
from beacon.types import Trajectory

CODE = (
    "\n```python\nimport cv2\nimport os\n\nimage = cv2.imread(image_path)\n"
    "x1, y1, x2, y2 = 1250, 1030, 1360, 1070\ncropped = image[y1:y2, x1:x2]\n"
    'path = os.path.join("/mnt/data/temp_processed_images/", "17127_crop.jpg")\n'
    "cv2.imwrite(path, cropped)\nprint(path)\n```\n"
)
RESPONSE = (
    "<think>The plate is small, so I crop and zoom on it.\n<code>"
    + CODE
    + "</code>\n<sandbox_output><image></sandbox_output>\nThe crop reads S QT 911, option C."
    "</think>\n<answer> **C. S QT 911** </answer>"
)
QUESTION = (
    "<image>\nQuestion: What is the plate number of the blue car?\nOptions:\nA. S OT 911\n"
    "B. S TQ 119\nC. S QT 911\nD. B QT 119\nPlease select the correct answer.\n"
    '### User Image Path: "/mllm_hdd/data/17127.jpg"\n### User Image Size: "1920x1080"'
)


def write_images(root):
    original, crop = Image.new("RGB", (64, 48), (9, 9, 9)), Image.new("RGB", (22, 8), (200, 0, 0))
    (root / "imgs").mkdir()
    original.save(root / "imgs" / "17127.png")
    crop.save(root / "imgs" / "17127_crop.png")
    return original, crop


def test_readme_shape_row(tmp_path):
    original, crop = write_images(tmp_path)
    row = {
        "image": ["imgs/17127.png", "imgs/17127_crop.png"],
        "question": QUESTION,
        "response": RESPONSE,
    }
    source = tmp_path / "thyme.jsonl"
    source.write_text(json.dumps(row) + "\n")
    summary = import_thyme(source, tmp_path / "out", image_root=tmp_path)
    assert (summary.total, summary.kept, summary.dropped) == (1, 1, {})

    line = (tmp_path / "out" / "trajectories.jsonl").read_text().splitlines()[0]
    traj = Trajectory.from_dict(json.loads(line))
    roles = [(s.role, s.kind) for s in traj.segments]
    assert roles == [
        ("prompt", "text"),
        ("generated", "text"),
        ("generated", "code"),
        ("observation", "text"),
        ("generated", "text"),
    ]
    prompt, think, code, obs, tail = traj.segments
    assert prompt.text == "user: " + QUESTION and prompt.images == [image_key(original)]
    assert think.text.endswith("<code>") and code.text == CODE + "</code>"
    assert obs.text == "\n<sandbox_output><image></sandbox_output>"
    assert obs.images == [image_key(crop)]
    assert tail.text.endswith("</answer>")
    assert "".join(s.text for s in traj.segments[1:]) == RESPONSE  # nothing lost or added
    assert not any(s.token_ids for s in traj.segments)  # the trainer tokenizes per segment
    assert traj.final_answer == "**C. S QT 911**"
    assert traj.used_tool and traj.tool_calls[0].code == CODE.strip("\n").removeprefix(
        "```python\n"
    ).removesuffix("\n```")
    assert traj.tool_calls[0].stdout == "" and traj.tool_calls[0].images == obs.images
    store = ImageStore(tmp_path / "out" / "images")
    assert store.get(obs.images[0]).size == crop.size


def test_messages_shape_and_dropped_rows_are_counted(tmp_path):
    write_images(tmp_path)
    good = {
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": RESPONSE},
        ],
        "images": [str(tmp_path / "imgs" / "17127.png"), str(tmp_path / "imgs" / "17127_crop.png")],
    }
    missing = {**good, "images": [str(tmp_path / "nope.png"), str(tmp_path / "nope2.png")]}
    mismatch = {**good, "images": good["images"][:1]}
    shareGPT = {
        "conversations": [
            {"from": "human", "value": QUESTION},
            {"from": "gpt", "value": RESPONSE},
            {"from": "human", "value": "And the colour?"},
            {"from": "gpt", "value": "<answer>blue</answer>"},
        ],
        "image": good["images"],
    }
    source = tmp_path / "rows.json"
    source.write_text(json.dumps([good, missing, mismatch, shareGPT, {"text": "?"}]))
    summary = import_thyme(source, tmp_path / "out")
    assert summary.kept == 1
    assert summary.dropped == {
        "missing_image": 1,
        "image_count_mismatch": 1,
        "multi_turn_chat": 1,
        "unknown_shape": 1,
    }
    traj = Trajectory.from_json((tmp_path / "out" / "trajectories.jsonl").read_text())
    assert traj.segments[0].text.startswith("system: You are a helpful assistant.\nuser: <image>")


@pytest.mark.timeout(60)
def test_images_are_read_only_as_regular_files_under_the_root(tmp_path):
    """`../`, a symlink out of the root, a FIFO (would block the import forever) and a device
    that reads as endless zeros (MemoryError) each drop their row, counted; the rest import."""
    root = tmp_path / "thyme"
    root.mkdir()
    write_images(root)
    (tmp_path / "outside.png").write_bytes((root / "imgs" / "17127.png").read_bytes())
    os.symlink(tmp_path / "outside.png", root / "imgs" / "link.png")
    make_fifo(root / "imgs" / "fifo.png")
    make_dev_zero(root / "imgs" / "zero.png")
    crop = "imgs/17127_crop.png"
    firsts = ["imgs/fifo.png", "imgs/zero.png", "../outside.png", "imgs/link.png", "imgs/17127.png"]
    rows = [
        {"image": [first, crop], "question": QUESTION, "response": RESPONSE} for first in firsts
    ]
    source = root / "thyme.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    summary = import_thyme(source, tmp_path / "out", image_root=root)
    assert summary.kept == 1
    assert summary.dropped == {"image_not_regular_file": 2, "image_outside_root": 2}
