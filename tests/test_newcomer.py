"""A newcomer's mistakes (issue 8): each bad input, run as a subprocess the way a user types it,
ends in a short message on stderr — no traceback — a non-zero exit, and no new or changed run
folder. A config error with one problem is one line; with several, one line per problem."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from beacon.config import load_config
from beacon.eval.config import EvalConfig
from beacon.runfolder import check_run_folder

SRC = Path(__file__).resolve().parents[1] / "src"
INFO_LOG = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ (DEBUG|INFO) ")  # progress logs, not errors


def beacon(args: list[str], cwd: Path, **more_env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC), "HF_HUB_OFFLINE": "1", **more_env}
    cmd = [sys.executable, "-m", "beacon", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
    }


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A folder with a good image, a corrupt one, a bad YAML, a file, and an existing run."""
    Image.new("RGB", (8, 8)).save(tmp_path / "ok.png")
    (tmp_path / "corrupt.png").write_bytes(b"\x89PNG not really")
    (tmp_path / "bad.yaml").write_text("engine: [1\n")
    (tmp_path / "unknown.yaml").write_text("enigne:\n  name: hf\n")
    (tmp_path / "afile").write_text("x")
    (tmp_path / "crop.py").write_text("print(image.size)\n")
    (tmp_path / "run").mkdir()
    config = load_config(EvalConfig, overrides=["out=run"])
    check_run_folder(tmp_path / "run", config, EvalConfig.OPERATIONAL_KEYS, folder_setting="--out")
    return tmp_path


# (arguments, a fragment the message must contain)
BAD_INPUTS = [
    (["eval", "--set", "agent.max_turn=3"], "did you mean agent.max_turns?"),
    (["eval", "--set", "agent.temperature=hot"], 'expected float, got "hot"'),
    (["eval", "--set", "nonsense"], "expected key=value"),
    (["eval", "--samples", "0"], "samples: must be >= 1"),
    (["eval", "--limit", "0"], "limit: must be >= 1 item per benchmark"),
    (["eval", "--limit", "-1"], "limit: must be >= 1 item per benchmark"),
    (["eval", "--concurrency", "abc"], "--concurrency"),
    (["eval", "--modes", "tool,sometimes"], 'expected one of "tool", "notool"'),
    (["eval", "--engine", "tgi"], "unknown engine 'tgi'"),
    (["eval", "--samples", "2"], "gives K identical samples"),
    (["eval", "--bench", "vstarr"], "unknown benchmark"),
    (["eval", "--bench", "vstar", "--data", "vstar=/nonexistent"], "no such file or folder"),
    (["eval", "--data", "vstar"], "NAME=PATH"),
    (["eval", "--data", "vstar=ok.png"], "not among benchmarks"),
    (["eval", "--config", "missing.yaml"], "file not found"),
    (["eval", "--config", "bad.yaml"], "not valid YAML"),
    (["eval", "--config", "unknown.yaml"], "did you mean engine?"),
    (["train", "grpo", "--config", "grpo_tiyn"], "did you mean grpo_tiny?"),
    (["configs", "cp", "grpo_tiyn"], "did you mean grpo_tiny?"),
    (["eval", "--out", "/proc/beacon_run"], "cannot create the run folder"),
    (["eval", "--out", "afile"], "cannot create the run folder"),
    (["eval", "--out", "run", "--set", "sandbox.timeout_s=3"], "sandbox.timeout_s: 10.0 -> 3.0"),
    (["eval", "--model", "/missing/dir"], "engine.model=/missing/dir: no such folder"),
    (["eval", "--model", "Qwen/Qwen2.5-VL-7B-Instruct"], "not in the local Hugging Face cache"),
    (["eval", "--bench", "vstar", "--out", "runs/v"], "not in the local Hugging Face cache"),
    (["run", "--image", "nope.png", "--question", "q"], "--image"),
    (["run", "--image", "corrupt.png", "--question", "q"], "cannot be read as an image"),
    (["run", "--image", "ok.png", "--question", "q", "--mode", "x"], "tool, notool or gated"),
    (["run", "--image", "ok.png", "--question", "q", "--model", "/missing/dir"], "no such folder"),
    (["sandbox", "run", "--image", "nope.png", "--code", "crop.py"], "--image nope.png: no such"),
    (["sandbox", "run", "--image", "afile", "--code", "crop.py"], "--image afile: cannot decode"),
    (["sandbox", "run", "--image", "corrupt.png", "--code", "crop.py"], "corrupt.png: cannot"),
    (["sandbox", "run", "--image", "ok.png", "--code", "nope.py"], "--code nope.py"),
    (["sandbox", "run", "--image", "ok.png", "--code", "corrupt.png"], "not a readable text"),
    (["report", "."], "no samples.jsonl"),
    (["report"], "Missing argument"),
    (["nosuchcommand"], "No such command"),
]


@pytest.mark.parametrize(("args", "fragment"), BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_gets_one_clear_line(workdir: Path, args: list[str], fragment: str) -> None:
    before = snapshot(workdir)
    done = beacon(args, workdir)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    assert "object at 0x" not in done.stderr, "name the file, not a Python object"
    lines = [line for line in done.stderr.strip().splitlines() if not INFO_LOG.match(line)]
    assert len(lines) == 1, done.stderr
    if args[0] == "sandbox":  # inputs are checked before any worker starts: no INFO lines
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert fragment in lines[0], lines[0]
    assert snapshot(workdir) == before, "a refused command must leave no run folder behind"


def test_report_of_several_runs_needs_its_own_folder(workdir: Path) -> None:
    for name in ("a", "b"):
        (workdir / name).mkdir()
        (workdir / name / "samples.jsonl").write_text("")
    done = beacon(["report", "a", "b"], workdir)
    assert done.returncode == 2 and "--out" in done.stderr
    done = beacon(["report", "a", "b", "--out", "a/cmp"], workdir)
    assert done.returncode == 2 and "inside run a" in done.stderr


def test_sandbox_run_saves_images_outside_the_current_folder(workdir: Path) -> None:
    (workdir / "show.py").write_text("image.crop((0, 0, 4, 4)).show()\n")
    before = snapshot(workdir)
    done = beacon(["sandbox", "run", "--image", "ok.png", "--code", "show.py"], workdir)
    assert done.returncode == 0, done.stderr
    saved = json.loads(done.stdout)["images"]
    assert saved and all(Path(p).is_file() and workdir not in Path(p).parents for p in saved)
    assert snapshot(workdir) == before


def test_unreachable_hub_is_one_line_at_once(workdir: Path) -> None:
    """No network and no HF_HUB_OFFLINE: a short probe, not minutes of retries."""
    before = snapshot(workdir)
    unreachable = {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"}
    done = beacon(["eval", "--bench", "vstar", "--out", "runs/v"], workdir, **unreachable)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()], done.stderr
    assert "unreachable" in done.stderr and "HF_HUB_OFFLINE=1" in done.stderr
    assert "--data" in done.stderr
    assert snapshot(workdir) == before


@pytest.mark.parametrize("command", [[], ["run"], ["eval"]], ids=["beacon", "run", "eval"])
def test_help_shows_no_bool_type_on_plain_flags(workdir: Path, command: list[str]) -> None:
    done = beacon([*command, "--help"], workdir, COLUMNS="100")
    assert done.returncode == 0, done.stderr
    flags = [line for line in done.stdout.splitlines() if "<bool>" in line]
    assert all("--help" in line for line in flags), flags  # typer's own --help keeps its type
