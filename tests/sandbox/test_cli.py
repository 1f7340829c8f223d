"""`beacon sandbox run` prints the result as JSON and saves the returned images."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image
from typer.testing import CliRunner

from beacon.cli import app

from .helpers import make_image


def test_sandbox_run_prints_json_and_saves_images(tmp_path: Path) -> None:
    image = tmp_path / "in.png"
    make_image().save(image)
    code = tmp_path / "code.py"
    code.write_text("print(image.size)\nimage.crop((0, 0, 16, 8)).show()\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["sandbox", "run", "--image", str(image), "--code", str(code), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout[result.stdout.index("{") :])
    assert report["ok"] and report["stdout"] == "(64, 48)\n"
    assert Image.open(report["images"][0]).size == (16, 8)
    assert Path(report["images"][0]).parent == out


def test_sandbox_run_exits_nonzero_on_error(tmp_path: Path) -> None:
    image = tmp_path / "in.png"
    make_image().save(image)
    code = tmp_path / "code.py"
    code.write_text("1 / 0\n")
    result = CliRunner().invoke(app, ["sandbox", "run", "--image", str(image), "--code", str(code)])
    assert result.exit_code == 1
    assert "ZeroDivisionError" in result.stdout
