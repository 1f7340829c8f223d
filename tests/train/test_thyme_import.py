"""An imported Thyme SFT row (the README's real format), tokenized for the student, gives loss
only on the model's own text and code (the import itself is tested in tests/data/test_thyme.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from beacon.data.thyme import normalize_row, row_trajectory
from beacon.fakes.trajectories import synthetic_image
from beacon.images import ImageStore
from beacon.train.core.encode import encode_trajectory
from beacon.types import Trajectory

CODE = (
    '\n```python\nimport cv2\nimport os\nfrom uuid import uuid4\n\nimage_path = "/eval/17127.jpg"\n'
    "image = cv2.imread(image_path)\nx1, y1, x2, y2 = 1250, 1030, 1360, 1070\n"
    "cropped_image = image[y1:y2, x1:x2]\n"
    'processed_path = os.path.join("/mnt/data/temp_processed_images/", "17127_ab.jpg")\n'
    "cv2.imwrite(processed_path, cropped_image)\nprint(processed_path)\n```\n"
)
RESPONSE = (
    "<think>To determine the plate number of the blue car, zoom in on the license plate.\n"
    f"Here is the Python code to crop and zoom in on the license plate area:\n<code>{CODE}</code>"
    "<sandbox_output><image></sandbox_output>Upon examining the cropped image, the characters "
    'are "S QT 911". This matches option C.</think>\n<answer> C </answer>'
)


@pytest.fixture()
def row(tmp_path: Path) -> dict[str, Any]:
    synthetic_image(1).save(tmp_path / "17127.jpg")
    synthetic_image(2).save(tmp_path / "17127_ebd8fd46.jpg")
    return {
        "image": ["/mllm_hdd/data/17127.jpg", "/mllm_hdd/data/temp/17127_ebd8fd46.jpg"],
        "question": "<image>\nQuestion: What is the plate number of the blue car in the picture?\n"
        "Options:\nA. S OT 911\nB. S TQ 119\nC. S QT 911\nD. B QT 119\n"
        "Please select the correct answer from the options above.",
        "response": RESPONSE,
    }


def test_imported_row_trains_only_on_model_text(
    row: dict, tmp_path: Path, tiny_tokenizer: Any
) -> None:
    store = ImageStore(tmp_path / "store")
    traj = row_trajectory(normalize_row(row), store, tmp_path, 0)
    encoded = encode_trajectory(traj, tiny_tokenizer, store.get)
    lengths = []
    for segment in traj.segments:  # each segment tokenized alone, as encode does
        single = Trajectory(sample_id="", mode="tool", format="thyme", segments=[segment])
        lengths.append(len(encode_trajectory(single, tiny_tokenizer, store.get)))
    assert sum(lengths) == len(encoded)
    want = []
    for segment, n in zip(traj.segments, lengths, strict=True):
        want += [1 if segment.role == "generated" else 0] * n
    assert encoded.loss_mask == want
    image_id = tiny_tokenizer.image_token_id
    image_tokens = [i for i, t in enumerate(encoded.input_ids) if t == image_id]
    assert image_tokens and all(encoded.loss_mask[i] == 0 for i in image_tokens)
    obs_start = sum(lengths[:3])
    assert any(obs_start <= i < obs_start + lengths[3] for i in image_tokens)
