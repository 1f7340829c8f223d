"""Builders of annotation rows and rollouts: images, code, sandbox outputs, critic labels."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image, ImageDraw

from beacon.images import ImageStore
from beacon.types import Segment, ToolCall, Trajectory

GROUPS = [  # (group type, [(correct, critic stage, final answer)] per rollout)
    ("all_correct", [(True, "CORRECT", "7")]),
    ("mixed", [(True, "CORRECT", "7"), (False, "ACQUIRE", "1")]),
    ("mixed", [(False, "READ", "9")]),
    ("all_wrong", [(False, "GROUND", "12")]),
    ("all_wrong", [(False, "OTHER", None)]),
]
CODE = (
    "<code>\n```python\nw, h = image.size\ncrop = image.crop((w // 2, 0, w, h // 2))\n"
    "crop = crop.resize((crop.width * 2, crop.height * 2))\ncrop.save('/mnt/data/crop.png')\n"
    "print('/mnt/data/crop.png')\n```\n</code>"
)


def chart(seed: int) -> Image.Image:
    image = Image.new("RGB", (320, 200), "white")
    draw = ImageDraw.Draw(image)
    for i, height in enumerate([40, 90, 140, 70]):
        draw.rectangle((30 + 70 * i, 180 - height, 80 + 70 * i, 180), fill=(40 + 50 * i, 90, 200))
    draw.text((210, 20), f"code {seed}7", fill="black")
    return image


def trajectory(sid: str, answer: str | None, crop_key: str, image_key: str) -> Trajectory:
    prompt = Segment(
        role="prompt",
        text="<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"
        "How many bars are taller than 60 pixels?<|im_end|>\n<|im_start|>assistant\n",
        images=[image_key],
    )
    segments = [
        prompt,
        Segment(
            role="generated",
            text="<think>The bars are small; I zoom into the upper right.</think>\n",
        ),
        Segment(role="generated", text=CODE, kind="code"),
        Segment(
            role="observation",
            text="<sandbox_output>/mnt/data/crop.png\n<image></sandbox_output>",
            images=[crop_key],
        ),
        Segment(
            role="generated",
            text=f"<think>In the crop I count the bars.</think>\n<answer>{answer}</answer>"
            if answer
            else "<think>I cannot tell.</think>",
        ),
    ]
    call = ToolCall(code=CODE, executed=True, ok=True, images=[crop_key])
    return Trajectory(
        sample_id=sid,
        mode="tool",
        format="thyme",
        segments=segments,
        final_answer=answer,
        finish_reason="answer" if answer else "stop",
        tool_calls=[call],
    )


def build_rows(folder: Path) -> list[dict]:
    store = ImageStore(folder / "images")
    rows = []
    for g, (group_type, rollouts) in enumerate(GROUPS):
        image = chart(g)
        image_key = store.put(image)
        crop_key = store.put(image.crop((160, 0, 320, 100)).resize((320, 200)))
        for k, (correct, stage, answer) in enumerate(rollouts):
            traj = trajectory(str(g), answer, crop_key, image_key)
            rows.append(
                {
                    "id": f"synth/{g}/tool/{k}",
                    "group_id": f"synth/{g}/tool",
                    "group_type": group_type,
                    "rollout_id": k,
                    "question": "How many bars are taller than 60 pixels?",
                    "reference": "7",
                    "images": [f"images/{image_key[:2]}/{image_key}.png"],
                    "image_root": "images",
                    "trajectory": json.loads(traj.to_json()),
                    "final_answer": answer,
                    "correct": correct,
                    "critic": {"stage": stage, "discrepancy": f"critic says {stage.lower()}"},
                    "label": None,
                }
            )
    return rows
