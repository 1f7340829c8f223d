"""beacon.sandbox.repair: each repair on its nasty cases; good code comes back byte for byte."""

from __future__ import annotations

import ast

import numpy as np
import pytest
from PIL import Image

from beacon.sandbox.repair import (
    CLAMP_HELPER_NAME,
    RepairConfig,
    clamp_box,
    repair_code,
)

IMAGE_PATH = "/episode/input_0.png"
OUTPUT_DIR = "/episode/out"


def repair(code: str, size: tuple[int, int] = (1000, 800), **config):
    return repair_code(
        code,
        image_size=size,
        image_path=IMAGE_PATH,
        output_dir=OUTPUT_DIR,
        config=RepairConfig(**config),
    )


GOOD_CODE = """\
import cv2  # the cv. in this comment stays
from PIL import Image

img = Image.open("/episode/input_0.png")   # odd   spacing kept
label = "héllo cv.imread('x.png')"; part = img.crop((10, 20, 300.5, 400))
arr = cv2.imread(image_path)
xcv.run()
crop = image.crop((0, 0, 1000, 800))
crop.save("/episode/out/crop_1.png")
with open("notes.txt") as f:
\tprint(f.read())
"""


def test_good_code_is_unchanged_byte_for_byte():
    result = repair(GOOD_CODE)
    assert result.code == GOOD_CODE
    assert result.changes == []
    assert result.syntax_error is None


# ------------------------------------------------------------------------------------- fences


def test_fence_with_language_tag_and_prose_around():
    code = "Let me crop.\n```python\nx = 1\ny = 2\n```\nDone.\n"
    result = repair(code)
    assert result.code == "x = 1\ny = 2\n"
    assert result.changes == ["removed markdown fences (```python)"]


def test_several_fenced_blocks_are_joined():
    assert repair("```py\na = 1\n```\ntext\n```\nb = a\n```").code == "a = 1\nb = a\n"


def test_lone_closing_fence_keeps_the_code_above():
    assert repair("a = 1\n```\n").code == "a = 1\n"
    assert repair("  ```python\na = 1\n").code == "a = 1\n"


# -------------------------------------------------------------------------------- indentation


def test_tabs_mixed_with_spaces():
    code = "for i in range(3):\n\tif i:\n        print(i)\n"
    result = repair(code)
    assert result.code == "for i in range(3):\n    if i:\n        print(i)\n"
    assert result.changes == ["expanded tabs in indentation to 4 spaces"]


def test_consistent_tabs_parse_and_stay():
    code = "if True:\n\tx = 1\n"
    assert repair(code).code == code


def test_whole_block_indented():
    result = repair("    x = 1\n    if x:\n        y = 2\n")
    assert result.code == "x = 1\nif x:\n    y = 2\n"
    assert result.changes == ["removed the indentation common to all lines"]


def test_first_line_indented_differently():
    assert repair("    import os\nx = 1\nif x:\n    y = 2\n").code == (
        "import os\nx = 1\nif x:\n    y = 2\n"
    )
    assert repair("import os\n    x = 1\n    y = 2\n").code == "import os\nx = 1\ny = 2\n"


def test_code_that_does_not_parse_is_returned_best_effort():
    code = "```python\n    x = (\n    img.save('/mnt/data/temp_processed_images/a.png')\n```"
    result = repair(code)
    assert result.code == "x = (\nimg.save('/episode/out/a.png')\n"
    assert result.syntax_error == "SyntaxError: '(' was never closed (line 1)"
    assert result.changes[-1].startswith("code does not parse (SyntaxError:")


# ---------------------------------------------------------------------------------- cv -> cv2


def test_cv_alias_outside_strings_and_other_names():
    code = 's = "cv.imread"\nimg = cv2.resize(cv.imread(p), None, fx=cv.INTER_X)\nxcv.a(mycv.b)\n'
    result = repair(code)
    assert result.code == (
        's = "cv.imread"\nimg = cv2.resize(cv2.imread(p), None, fx=cv2.INTER_X)\nxcv.a(mycv.b)\n'
    )
    assert result.changes == ["cv. -> cv2. (line 2)"]


def test_cv_bound_by_import_is_left_alone():
    code = "import cv2 as cv\nimg = cv.imread(image_path)\n"
    assert repair(code).code == code


def test_cv_inside_fstring():
    assert repair('print(f"{cv.x} é {cv.y!r}")\n').code == 'print(f"{cv2.x} é {cv2.y!r}")\n'


# ------------------------------------------------------------------------------------- crops


@pytest.mark.parametrize(
    ("box", "fixed"),
    [
        ("(300, 400, 100, 200)", "(100, 200, 300, 400)"),  # reversed
        ("(-20, -5, 50, 60)", "(0, 0, 50, 60)"),  # negative
        ("(10.5, 20.25, 1200.7, 900)", "(10, 20, 1000, 800)"),  # floats, outside
        ("(1200, 900, 1300, 950)", "(996, 796, 1000, 800)"),  # entirely outside
        ("(500, 500, 501, 500)", "(498, 498, 502, 502)"),  # smaller than min_crop_size
        ("[0, 0, 2000, 10]", "[0, 0, 1000, 10]"),  # a list box stays a list
    ],
)
def test_literal_box_on_input_image_is_clamped(box, fixed):
    code = f"img = Image.open(image_path)\npart = img.crop({box})\n"
    result = repair(code)
    assert result.code == f"img = Image.open(image_path)\npart = img.crop({fixed})\n"
    assert result.changes == [
        f"line 2: crop box {ast.literal_eval(box.replace('[', '(').replace(']', ')'))} -> "
        f"{ast.literal_eval(fixed.replace('[', '(').replace(']', ')'))} for the 1000x800 image"
    ]


def test_min_crop_size_is_configurable():
    result = repair("c = Image.open(image_path).crop((10, 10, 11, 11))\n", min_crop_size=10)
    assert result.code == "c = Image.open(image_path).crop((5, 5, 15, 15))\n"


def test_valid_float_box_is_kept():
    code = "img = Image.open(image_path)\nc = img.crop((10.5, 20.5, 30.5, 40.5))\n"
    assert repair(code).code == code


def test_preset_image_keeps_valid_literal_boxes_and_checks_the_rest_at_run_time():
    """An earlier call may have rebound `image` (the sandbox carries variables): its size is
    unknown here, so a box that does not fit the input image is checked at run time."""
    code = "a = image.crop((0, 0, 1000, 800))\nb = image.crop((0, 0, 1600, 800))\n"
    assert repair(code).code == (
        "a = image.crop((0, 0, 1000, 800))\n"
        f"b = image.crop({CLAMP_HELPER_NAME}((0, 0, 1600, 800), image.size, 4))\n"
    )


def test_names_opened_from_the_input_image_count_as_input():
    code = (
        "from PIL import Image\n"
        "img = Image.open(image_path).convert('RGB')\n"
        "with Image.open('/path/to/img.jpg') as im:\n"
        "    a = im.crop(box=(0, 0, 5000, 5000))\n"
        "b = img.crop((-1, 0, 10, 10))\n"
        "c = Image.open(image_path).crop((0, 0, 9999, 10))\n"
    )
    result = repair(code)
    assert "a = im.crop(box=(0, 0, 1000, 800))" in result.code
    assert "b = img.crop((0, 0, 10, 10))" in result.code
    assert "c = Image.open(image_path).crop((0, 0, 1000, 10))" in result.code


def test_variable_box_is_wrapped_in_the_runtime_helper():
    code = "box = (1, 2, 3, 4)\nc = img.crop(box)\nd = self.page.crop(box=get_box(x))\n"
    result = repair(code)
    assert result.code == (
        "box = (1, 2, 3, 4)\n"
        f"c = img.crop({CLAMP_HELPER_NAME}(box, img.size, 4))\n"
        f"d = self.page.crop(box={CLAMP_HELPER_NAME}(get_box(x), self.page.size, 4))\n"
    )
    assert (
        result.changes[0] == f"line 2: box of img.crop checked at run time by {CLAMP_HELPER_NAME}"
    )


def test_literal_box_on_another_image_is_checked_at_run_time():
    """A resized image is bigger than image_size: clamping to image_size would be wrong."""
    code = "big = image.resize((2000, 1600))\nc = big.crop((1500, 1500, 1900, 1590))\n"
    assert f"big.crop({CLAMP_HELPER_NAME}((1500, 1500, 1900, 1590), big.size, 4))" in (
        repair(code).code
    )
    rebound = "image = image.rotate(90, expand=True)\nc = image.crop((0, 0, 900, 900))\n"
    assert CLAMP_HELPER_NAME in repair(rebound).code


def test_nested_crops():
    code = "im = Image.open(image_path)\nc = im.crop(im.crop((0, 0, 5000, 10)).getbbox())\n"
    assert repair(code).code == (
        "im = Image.open(image_path)\n"
        f"c = im.crop({CLAMP_HELPER_NAME}(im.crop((0, 0, 1000, 10)).getbbox(), im.size, 4))\n"
    )


def test_crop_on_a_call_result_with_variable_box_is_left_alone():
    code = "c = make().crop(box)\n"
    assert repair(code).code == code


def test_offsets_after_non_ascii_text_on_the_same_line():
    code = 's = "日本語"; c = Image.open(image_path).crop((-5, 0, 50, 50)); d = cv.blur(x)\n'
    assert repair(code).code == code.replace("(-5, 0", "(0, 0").replace("cv.", "cv2.")


# ------------------------------------------------------------------------------------ clamp_box


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


# ------------------------------------------------------------------------------------- paths


def test_invented_image_paths_are_rewritten():
    code = (
        "a = Image.open('/path/to/image.jpg')\n"
        'b = cv2.imread("input.PNG")\n'
        "c = open('photo.webp', 'rb').read()\n"
        "d = PIL.Image.open('x.bmp')\n"
    )
    result = repair(code)
    assert result.code == (
        "a = Image.open('/episode/input_0.png')\n"
        "b = cv2.imread('/episode/input_0.png')\n"
        "c = open('/episode/input_0.png', 'rb').read()\n"
        "d = PIL.Image.open('/episode/input_0.png')\n"
    )
    assert result.changes[0] == "line 1: image path '/path/to/image.jpg' -> '/episode/input_0.png'"


def test_real_output_saved_and_non_image_paths_are_kept():
    code = (
        "a = Image.open('/episode/input_0.png')\n"
        "b = Image.open('/episode/out/crop_1.png')\n"
        "image.save('mine.png'); c = Image.open('mine.png')\n"
        "open('new.png', 'wb').write(data)\n"
        "d = open('data.csv').read()\n"
        "e = Image.open(other_path)\n"
        "f = Image.open('/episode/../episode/input_0.png')\n"
    )
    result = repair(code)
    assert result.code == code
    assert result.changes == []


def test_invented_path_bound_to_a_name_first():
    """Thyme-style code names the path before opening it; the opened name counts as the input."""
    code = (
        'image_path = "/mnt/data/images/photo.jpg"\n'
        "img = Image.open(image_path)\n"
        "again = cv2.imread(image_path)\n"
        "out = 'result.png'\n"
        "img.crop((0, 0, 4000, 10)).save(out)\n"
        "check = Image.open(out)\n"
    )
    result = repair(code)
    assert result.code == (
        "image_path = '/episode/input_0.png'\n"
        "img = Image.open(image_path)\n"
        "again = cv2.imread(image_path)\n"
        "out = 'result.png'\n"
        "img.crop((0, 0, 1000, 10)).save(out)\n"
        "check = Image.open(out)\n"
    )
    assert len(result.changes) == 2


def test_path_name_bound_twice_is_not_a_literal_binding():
    code = (
        "p = 'a.jpg'\nif x:\n    p = make()\nimg = Image.open(p)\nc = img.crop((0, 0, 9000, 9))\n"
    )
    result = repair(code)
    assert result.code == code.replace(
        "(0, 0, 9000, 9)", f"{CLAMP_HELPER_NAME}((0, 0, 9000, 9), img.size, 4)"
    )


def test_other_inputs_of_a_multi_image_episode_are_kept():
    code = "a = Image.open('/episode/input_1.png')\nb = Image.open('/episode/input_9.png')\n"
    result = repair_code(
        code,
        image_size=(10, 10),
        image_path=IMAGE_PATH,
        output_dir=OUTPUT_DIR,
        other_image_paths=["/episode/input_1.png"],
    )
    assert result.code == code.replace("input_9", "input_0")


def test_thyme_save_folder_goes_to_output_dir():
    code = (
        "os.makedirs('/mnt/data/temp_processed_images', exist_ok=True)\n"
        "p = f'/mnt/data/temp_processed_images/crop_{i}.png'\n"
        "q = '/mnt/data/temp_processed_images_v2/x.png'\n"
    )
    result = repair(code)
    assert result.code == (
        "os.makedirs('/episode/out', exist_ok=True)\n"
        "p = f'/episode/out/crop_{i}.png'\n"
        "q = '/mnt/data/temp_processed_images_v2/x.png'\n"
    )
    assert result.changes == ["save folder /mnt/data/temp_processed_images -> /episode/out (2x)"]


def test_repairs_can_be_switched_off():
    code = "c = cv.blur(image.crop((-1, 0, 5, 5)))\nd = Image.open('a.jpg')\n"
    off = dict(fix_cv_alias=False, clamp_crops=False, fix_image_paths=False)
    assert repair(code, **off).code == code


# ----------------------------------------------------------------------------- run the result


def test_repaired_thyme_code_runs_with_the_injected_helper(tmp_path):
    """The contract with the sandbox: inject clamp_box as CLAMP_HELPER_NAME, and it runs."""
    image_path = tmp_path / "input.png"
    Image.new("RGB", (64, 48), "red").save(image_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code = """```python
from PIL import Image
import os
img = Image.open("/mnt/user-data/picture.jpg")
box = (50, 40, 90, 90)
zoom = img.crop(box).resize((32, 32))
corner = img.crop((-10, -10, 2, 2))
class Tool:
    def run(self, im, b):
        return im.crop(b)
small = Tool().run(img, (70, 70, 80, 80))
path = os.path.join("/mnt/data/temp_processed_images/", "zoom.png")
zoom.save(path)
print(corner.size, small.size)
```"""
    result = repair_code(
        code, image_size=(64, 48), image_path=str(image_path), output_dir=str(out_dir)
    )
    namespace = {CLAMP_HELPER_NAME: clamp_box}
    exec(compile(result.code, "<model>", "exec"), namespace)
    assert namespace["corner"].size == (4, 4)
    assert namespace["small"].size == (4, 4)  # (70, 70, 80, 80) lies outside the 64x48 image
    assert Image.open(out_dir / "zoom.png").size == (32, 32)
