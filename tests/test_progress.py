"""Progress off a terminal is plain log lines, at most one per `LOG_EVERY_S` (never a tqdm
redraw with carriage returns); on a terminal it is tqdm's bar; every command that shows
progress takes --no-progress."""

from __future__ import annotations

import ast
import fcntl
import logging
import os
import pty
import struct
import subprocess
import sys
import termios
import textwrap
from pathlib import Path

import pytest
import typer

from beacon import progress
from beacon.cli import app

SRC = Path(__file__).resolve().parents[1] / "src"

# 2,000 updates on a clock that moves 0.01 s per reading: about 20-40 simulated seconds
LOOP = textwrap.dedent(
    """
    import logging, sys
    import beacon.progress as progress

    now = [0.0]
    def clock():
        now[0] += 0.01
        return now[0]

    progress.monotonic = clock
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with progress.Progress("work", total=2000, unit="item") as bar:
        for i in range(2000):
            bar.set_postfix({"acc": i % 7})
            bar.update()
    print(now[0])
    """
)


def _loop(stderr: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.Popen(
        [sys.executable, "-c", LOOP], stdout=subprocess.PIPE, stderr=stderr, env=env
    )


def test_off_a_terminal_progress_is_a_few_plain_lines() -> None:
    proc = _loop(subprocess.PIPE)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert b"\r" not in err
    lines = err.decode().splitlines()
    simulated = float(out)
    # one line per LOG_EVERY_S of the loop's (simulated) time, and the closing one
    assert 2 <= len(lines) <= simulated / progress.LOG_EVERY_S + 1, lines
    assert all(line.startswith("work: ") for line in lines), lines
    assert lines[-1].startswith("work: 2000/2000 item (")
    assert lines[-1].endswith(" acc=4")  # 1999 % 7


def test_on_a_terminal_progress_is_tqdms_bar() -> None:
    leader, follower = pty.openpty()
    # a new pty is 0 columns wide, and tqdm draws a 0-column bar: give it a terminal's width
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = _loop(follower)
    os.close(follower)
    shown = b""
    try:
        while chunk := os.read(leader, 65536):  # read while it runs: a full pty blocks it
            shown += chunk
    except OSError:  # EIO: the child closed its end, everything is read
        pass
    finally:
        os.close(leader)
    proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert b"\r" in shown and b"2000/2000" in shown


def test_track_counts_and_logs_the_last_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(progress, "on_terminal", lambda: False)
    with caplog.at_level(logging.INFO, logger="beacon.progress"):
        assert list(progress.track(iter("abc"), "letters", unit="letter")) == ["a", "b", "c"]
        assert list(progress.track(range(2), "off", enabled=False)) == [0, 1]
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == ["letters: 3 letter"]


def test_library_bars_are_off_off_a_terminal_unless_the_user_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(progress, "on_terminal", lambda: False)
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    monkeypatch.setenv("TQDM_DISABLE", "")
    progress.quiet_library_bars()
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    assert os.environ["TQDM_DISABLE"] == ""


def test_only_the_progress_module_imports_tqdm() -> None:
    importers = []
    for path in (SRC / "beacon").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "tqdm" or n.startswith("tqdm.") for n in names):
                importers.append(path.relative_to(SRC).as_posix())
    assert sorted(set(importers)) == ["beacon/progress.py"]


PROGRESS_COMMANDS = [
    "eval",
    "demo",
    "train sft",
    "train grpo",
    "train opd",
    "train rft",
    "data difficulty",
    "data expert",
    "data hints",
    "data import-thyme",
]


@pytest.mark.parametrize("path", PROGRESS_COMMANDS)
def test_every_command_that_shows_progress_takes_no_progress(path: str) -> None:
    command = typer.main.get_command(app)
    for name in path.split():
        command = command.commands[name]  # a group's sub-command
    assert "--no-progress" in {opt for p in command.params for opt in p.opts}


def test_a_command_off_a_terminal_writes_its_progress_as_one_line(tmp_path: Path) -> None:
    source = tmp_path / "thyme.jsonl"
    source.write_text("{}\n{}\n")
    cmd = [sys.executable, "-m", "beacon.cli", "data", "import-thyme", str(source)]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [*cmd, "--out", str(tmp_path / "out")], capture_output=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert b"\r" not in done.stderr
    lines = [line for line in done.stderr.decode().splitlines() if "import-thyme: " in line]
    assert len(lines) == 1 and "import-thyme: 2 row (" in lines[0], done.stderr.decode()
