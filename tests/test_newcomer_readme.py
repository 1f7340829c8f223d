"""Every `beacon` command of the README, run as written (issue 8).

The commands are parsed from the README's bash blocks, so the test follows the README. How a
command is run, and the only changes made to it:

- Chains (`a && b`) are split; only the `beacon ...` parts run: installing packages and running
  pytest are the environment, not Beacon.
- `/tmp/tiny` becomes a folder of the test and port 8000 a free port, so parallel runs do not
  collide. Everything else is verbatim, run in a folder holding the README's `cat.png` and
  `crop.py`.
- Hub-model commands run with `HF_HUB_OFFLINE=1` (no network in tests): they must end in one
  line on stderr and a non-zero exit, no traceback.
- The served eval gets `--limit 1` appended, the command otherwise verbatim (the last
  `--limit` wins).
- The training section runs in the same folder, which holds no configs: it names the ones
  shipped in the package (`-c synth_tiny`). Its scripted expert (`... &`) is started like
  `beacon serve`, on a free port that the data commands are pointed at
  (`--set expert.engine.base_url=...`), shortened to 4 items; its SFT gets
  `--set train.max_steps=12 --set train.save_every=12` and its eval `--limit 2` appended, the
  checkpoint it names following the shortened run.
- The main job (`beacon demo --quick`, a few minutes) runs verbatim; the full demo
  (`beacon demo`) gets `--show-config` appended, which checks that its settings resolve
  without training (`BEACON_FULL_README=1` runs it in full).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
MAIN_JOB = "beacon demo --quick"
FULL_DEMO = "beacon demo"
HUB_MODEL = "Qwen/"
INFO_LOG = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ (DEBUG|INFO|WARNING) ")


def readme_commands() -> list[str]:
    """The `beacon ...` commands of the README's bash blocks, comments removed, in order."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    commands = []
    for line in "\n".join(blocks).splitlines():
        for part in line.split("&&"):
            words = shlex.split(part, comments=True)
            if words and words[0] == "beacon":
                commands.append(shlex.join(words))
    return commands


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(SRC), "HF_HUB_OFFLINE": "1"}


def argv(command: str, tiny: Path, port: int) -> list[str]:
    words = shlex.split(command.replace("/tmp/tiny", str(tiny)).replace("8000", str(port)))
    return [sys.executable, "-m", "beacon", *[w for w in words[1:] if w != "&"]]


def shortened(command: str, port: int) -> tuple[str, tuple[str, ...]]:
    """The command and the arguments appended to it (see the module docstring)."""
    if "--engine openai" in command:
        return command, ("--limit", "1")
    if command.startswith("beacon data") and " -c " in command:
        url = f"expert.engine.base_url=http://127.0.0.1:{port}/v1"
        return command, ("--set", url, "--set", "pool.limit=4")
    if command.startswith("beacon train sft"):
        return command, ("--set", "train.max_steps=12", "--set", "train.save_every=12")
    if command.startswith("beacon eval --model runs/sft-tiny/"):
        return re.sub(r"checkpoint-\d+", "checkpoint-12", command), ("--limit", "2")
    return command, ()


def run(command: str, cwd: Path, tiny: Path, port: int, extra: tuple[str, ...] = ()):
    cmd = [*argv(command, tiny, port), *extra]
    return subprocess.run(cmd, cwd=cwd, env=env(), capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the README's `cat.png` and `crop.py`."""
    cwd = tmp_path_factory.mktemp("tour")
    Image.new("RGB", (64, 48), (200, 120, 40)).save(cwd / "cat.png")
    (cwd / "crop.py").write_text("w, h = image.size\nimage.crop((0, 0, w // 2, h // 2)).show()\n")
    return cwd


def wait_until_serving(server: subprocess.Popen, port: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"beacon serve exited: {server.stderr.read() if server.stderr else ''}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    pytest.fail("beacon serve did not answer within 120 s")


@contextlib.contextmanager
def serving(args: list[str], cwd: Path, port: int) -> Iterator[None]:
    """A `beacon serve` process, answering on `port`, stopped on exit."""
    server = subprocess.Popen(
        args, cwd=cwd, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_until_serving(server, port)
        yield
    finally:
        server.terminate()
        server.wait(timeout=30)


def stderr_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.strip().splitlines() if not INFO_LOG.match(line)]


def test_readme_lists_the_commands_this_test_runs() -> None:
    commands = readme_commands()
    assert MAIN_JOB in commands
    assert FULL_DEMO in commands
    assert any(c.startswith("beacon serve") for c in commands)
    assert any(HUB_MODEL in c for c in commands)


def test_install_line_pins_torch_through_the_repository_constraints() -> None:
    """The README and CI install with the constraints file, which pins the tested torch; the
    package metadata itself keeps a floor only, so a user's own torch build stays."""
    readme = (ROOT / "README.md").read_text()
    install = [line for line in readme.splitlines() if "pip install" in line and "-e" in line]
    assert install and all('-c constraints.txt -e ".[dev]"' in line for line in install), install
    assert '-c constraints.txt -e ".[dev]"' in (ROOT / ".ci" / "run").read_text()
    pins = (ROOT / "constraints.txt").read_text()
    assert re.search(r"^torch==\d+\.\d+\.\d+$", pins, re.M), pins
    metadata = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^\s*"torch>=[\d.]+",', metadata, re.M) and "torch==" not in metadata


@pytest.mark.slow
@pytest.mark.full
def test_short_tour_runs_as_written(tour: Path) -> None:
    tiny, port, expert_port = tour / "tiny", free_port(), free_port()
    with contextlib.ExitStack() as stack:
        for readme_command in readme_commands():
            if readme_command == MAIN_JOB:
                continue  # test_main_job_runs_as_written
            if readme_command.startswith("beacon serve"):
                stack.enter_context(serving(argv(readme_command, tiny, port), tour, port))
                continue
            if shlex.split(readme_command)[-1] == "&":  # the scripted expert, in the background
                server = [*argv(readme_command, tiny, port), "--port", str(expert_port)]
                stack.enter_context(serving(server, tour, expert_port))
                continue
            if readme_command.startswith("beacon report"):  # the served run, twice
                for name in ("a", "b"):
                    shutil.copytree(tour / "runs" / "served", tour / "runs" / name)
            command, extra = shortened(readme_command, expert_port)
            if command == FULL_DEMO and os.environ.get("BEACON_FULL_README") != "1":
                extra = ("--show-config",)
            done = run(command, tour, tiny, port, extra)
            assert "Traceback" not in done.stderr, f"{command}\n{done.stderr}"
            if HUB_MODEL in command:  # offline: one clear line, non-zero exit
                assert done.returncode != 0, command
                assert len(stderr_lines(done)) == 1, f"{command}\n{done.stderr}"
                assert "HF_HUB_OFFLINE" in done.stderr or "cache" in done.stderr, done.stderr
            else:
                assert done.returncode == 0, f"{command}\n{done.stderr}"
    assert (tour / "runs" / "served" / "summary.json").is_file()
    assert (tour / "runs" / "a_vs_b" / "report.md").is_file()
    assert (tour / "runs" / "data_synth" / "hints" / "summary.json").is_file()
    assert (tour / "runs" / "sft-eval" / "summary.json").is_file()


@pytest.mark.slow
@pytest.mark.full
def test_main_job_runs_as_written(tmp_path: Path) -> None:
    """The README's main job, verbatim: the quick demo from the shipped cold start shows NAAR
    raising mode adaptiveness above accuracy-only's, intervals apart, in a report with plots."""
    done = run(MAIN_JOB, tmp_path, tmp_path / "unused", 0)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    out = tmp_path / "runs" / "demo-quick"
    for name in ("report.md", "learning_curves.png", "adaptivity.png", "demo.yaml"):
        assert (out / name).is_file(), name
    found = [
        line for line in (out / "report.md").read_text().splitlines() if "NAAR raises MA" in line
    ]
    assert len(found) == 1 and ": reproduced (" in found[0], found


@pytest.mark.slow
def test_openai_engine_without_a_tokenizer_runs_text_only(tour: Path) -> None:
    """The server's model name is neither a local path nor cached: the episode runs text-only."""
    tiny, port = tour / "tiny", free_port()
    if not tiny.is_dir():
        run("beacon tiny make /tmp/tiny", tour, tiny, port)
    serve = argv(f"beacon serve --model /tmp/tiny --port {port}", tiny, port)
    with serving([*serve, "--served-model-name", "served-tiny"], tour, port):
        eval_ = f"beacon eval --engine openai --base-url http://127.0.0.1:{port}/v1"
        done = run(f"{eval_} --model served-tiny --limit 1 --out runs/text", tour, tiny, port)
    assert done.returncode == 0, done.stderr
    lines = (tour / "runs" / "text" / "trajectories.jsonl").read_text().splitlines()
    segments = [s for line in lines for s in json.loads(line)["trajectory"]["segments"]]
    generated = [s for s in segments if s["role"] == "generated"]
    assert generated and all(s["text"] and not s["token_ids"] for s in generated)
