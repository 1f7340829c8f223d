"""Crop boxes clamped at run time: `crops.clamp_box`, and `Image.crop` patched in the child."""

from __future__ import annotations

import numpy as np
import pytest

from beacon.sandbox import Sandbox, SandboxConfig
from beacon.sandbox.crops import clamp_box
from beacon.sandbox.repair import RepairConfig

from .helpers import make_image, tight_config


def test_clamp_box_keeps_valid_boxes_as_given():
    box = (1.5, 2, 30, 40.0)
    assert clamp_box(box, (100, 80)) is box


def test_clamp_box_repairs_and_handles_odd_inputs():
    assert clamp_box((50, 60, -10, -20), (100, 80)) == (0, 0, 50, 60)
    assert clamp_box((0, 0, 1, 1), (2, 3), min_size=4) == (0, 0, 2, 3)  # image below min size
    assert clamp_box(np.array([-3.0, 1, 10, 10]), np.array([20, 20])) == (0, 1, 10, 10)
    for junk in [(1, 2, 3), "abcd", None, (0, 0, float("nan"), 4), (True, 0, 4, 4)]:
        assert clamp_box(junk, (100, 80)) is junk
    assert clamp_box((0, 0, 4, 4), (0, 80)) == (0, 0, 4, 4)


@pytest.mark.parametrize(
    ("box", "fixed"),
    [
        ("(-10, -20, 30, 40)", (0, 0, 30, 40)),
        ("(30, 40, 10, 5)", (10, 5, 30, 40)),  # unordered
        ("(0, 0, 5000, 9000)", (0, 0, 64, 48)),
        ("[10.2, 5.7, 20.5, 30.1]", None),  # valid floats pass unchanged (PIL rounds them)
        ("(20, 20, 21, 20)", (18, 18, 22, 22)),  # smaller than min_crop_size
        ("(100, 100, 120, 120)", (60, 44, 64, 48)),  # outside: the strip at the nearest edge
    ],
)
def test_crop_boxes_are_clamped_at_run_time(sandbox: Sandbox, box: str, fixed: tuple | None):
    """Any expression yields the box: a literal, a variable, a method of a class the code made."""
    code = (
        f"box = {box}\n"
        "class Tool:\n    def run(self, im, b):\n        return im.crop(b)\n"
        "print(Tool().run(image, box).size)"
    )
    with sandbox.session(images=[make_image()]) as session:
        result = session.run(code)
    assert result.ok, result.error
    if fixed is None:
        assert result.notes == []
        return
    assert result.stdout == f"({fixed[2] - fixed[0]}, {fixed[3] - fixed[1]})\n"
    assert len(result.notes) == 1
    assert f"clamped to {fixed}" in result.notes[0]
    assert "64x48 image" in result.notes[0]


def test_a_crop_is_clamped_to_its_own_image_not_the_input(sandbox: Sandbox):
    code = "big = image.resize((200, 100))\nprint(big.crop((150, 50, 190, 90)).size)"
    with sandbox.session(images=[make_image()]) as session:
        result = session.run(code)
    assert result.ok and result.stdout == "(40, 40)\n" and result.notes == []


def test_many_clamped_crops_make_few_notes(sandbox: Sandbox):
    with sandbox.session(images=[make_image()]) as session:
        result = session.run("for i in range(10):\n    image.crop((-i, 0, 10, 10))")
    assert result.ok, result.error
    assert len(result.notes) == 3  # the 9 clamped boxes (i > 0): 3 notes, the last counts the rest
    assert result.notes[-1].endswith("(6 more crop boxes were clamped too)")


@pytest.mark.parametrize(
    ("repair", "size"),
    [(RepairConfig(min_crop_size=10), "(10, 10)"), (RepairConfig(clamp_crops=False), "(1, 0)"),
     (None, "(1, 0)")],
)  # fmt: skip
def test_clamping_follows_the_repair_config(repair: RepairConfig | None, size: str):
    config: SandboxConfig = tight_config(num_workers=1, repair=repair)
    with Sandbox(config) as sb, sb.session(images=[make_image()]) as session:
        result = session.run("print(image.crop((5, 5, 6, 5)).size)")
    assert result.ok, result.error
    assert result.stdout == f"{size}\n"


def test_returned_images_carry_the_box_they_were_cropped_from(sandbox: Sandbox):
    """In the input image's pixels, through a zoom and a crop of the zoom, a saved file read
    back, a clamped box and a second input; images made otherwise have none."""
    code = (
        "zoom = image.crop((8, 4, 40, 36)).resize((64, 64))\n"
        "zoom.crop((32, 0, 64, 32)).show()\n"
        "path = '/mnt/data/temp_processed_images/a.png'\n"
        "Image.open(image_paths[1]).crop((1, 2, 5, 6)).save(path)\n"
        "print(path)\n"
        "image.crop((-10, 0, 10, 10)).show()\n"
        "Image.fromarray(np.zeros((4, 4, 3), dtype=np.uint8)).show()"
    )
    with sandbox.session(images=[make_image(), make_image()]) as session:
        result = session.run(code)
    assert result.ok, result.error
    assert [None if c is None else (c.frame, c.box) for c in result.image_crops] == [
        (0, (24, 4, 40, 20)),  # the zoom's right half of the top: x 8 + 32/2 .. 8 + 64/2
        (0, (0, 0, 10, 10)),  # clamped, as the note says
        None,  # made from an array: no frame
        (1, (1, 2, 5, 6)),  # saved and printed (files come after shown images)
    ]
