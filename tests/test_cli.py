"""The command line: every command has help, and the first things a new user runs work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from beacon.cli import app
from beacon.errors import UserError

runner = CliRunner()


@pytest.mark.parametrize(
    "command",
    [[], ["eval"], ["report"], ["run"], ["serve"], ["sandbox"], ["sandbox", "run"], ["tiny"],
     ["tiny", "make"], ["bench"], ["bench", "list"], ["bench", "show"]],
)  # fmt: skip
def test_every_command_explains_itself(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output and len(result.output.splitlines()) > 5


def test_run_prints_a_readable_trajectory(tmp_path: Path, tiny_model_path: Path) -> None:
    image = tmp_path / "img.png"
    Image.new("RGB", (80, 60), "white").save(image)
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        ["run", "--image", str(image), "--question", "What is here?", "--model",
         str(tiny_model_path), "--mode", "notool", "--max-new-tokens", "12", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "── model" in result.output and "finish: max_tokens" in result.output
    saved = json.loads((out / "trajectory.json").read_text())
    assert saved["mode"] == "notool" and saved["finish_reason"] == "max_tokens"


def test_run_rejects_an_unknown_mode(tmp_path: Path) -> None:
    image = tmp_path / "img.png"
    Image.new("RGB", (8, 8)).save(image)
    result = runner.invoke(app, ["run", "--image", str(image), "--question", "?", "--mode", "x"])
    assert result.exit_code != 0 and "gated" in result.output and "got 'x'" in result.output


def test_show_config_lists_every_setting_with_help() -> None:
    result = runner.invoke(app, ["eval", "--show-config"])
    assert result.exit_code == 0, result.output
    for name in ("engine.model", "agent.max_turns", "sandbox.timeout_s", "samples", "modes"):
        assert name in result.output
    assert "new tokens per episode" in result.output


def test_report_refuses_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert isinstance(result.exception, UserError) and "samples.jsonl" in str(result.exception)
