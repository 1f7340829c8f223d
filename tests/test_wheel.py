"""The wheel a user installs works on its own: built from the repository, installed into a fresh
virtual environment, run from an empty folder (issue 51).

A file the package data leaves out (a shipped config, the cold start) fails here, not in the
source tree, where every file is at hand. To keep it cheap and offline the new environment reuses
this one's dependencies: a `.pth` line appends this environment's site-packages to its path,
after its own, and only that folder (not the `.pth` files in it, so an editable install of the
repository is not picked up); `beacon` must import from the wheel's copy, which the test checks.
HOME and the caches point into the test's folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from beacon import __version__, configs

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 300


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    assert done.returncode == 0, f"{args}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


def build_wheel(tmp: Path) -> Path:
    """`pip wheel` of a copy of the repository's package files (the build writes `build/` and
    an egg-info folder next to the sources, which must not land in the repository)."""
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    run([*pip, str(source), "-w", str(tmp / "dist")], tmp, dict(os.environ))
    (wheel,) = (tmp / "dist").glob("beacon_vr-*.whl")
    return wheel


def fresh_venv(tmp: Path) -> Path:
    """A virtual environment that sees this environment's packages after its own."""
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp, dict(os.environ))
    python = venv / "bin" / "python"
    where = [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
    site = run(where, tmp, dict(os.environ)).stdout.strip()
    here = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
    Path(site, "beacon_test_deps.pth").write_text("".join(f"{p}\n" for p in here))
    return python


@pytest.mark.slow
def test_wheel_installs_and_runs_from_an_empty_folder(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(f"beacon_vr-{__version__}.dist-info/METADATA").decode()
    root = configs.root()
    shipped = {f"beacon/configs/{c.path.relative_to(root)}" for c in configs.shipped().values()}
    assert shipped <= names, sorted(shipped - names)
    assert any(n.startswith("beacon/demo/assets/cold_start/") for n in names)
    torch_req = [line for line in metadata.splitlines() if line.startswith("Requires-Dist: torch")]
    assert torch_req and all("==" not in line for line in torch_req), torch_req

    python = fresh_venv(tmp_path)
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index", "-q"]
    # Every dependency, torch included, is satisfied by what is installed: pip would add only
    # Beacon and replace nothing.
    report = tmp_path / "report.json"
    run([*pip, "--dry-run", "--report", str(report), str(wheel)], tmp_path, dict(os.environ))
    assert [i["metadata"]["name"] for i in json.loads(report.read_text())["install"]] == [
        "beacon-vr"
    ]
    run([*pip, "--no-deps", str(wheel)], tmp_path, dict(os.environ))

    home, empty = tmp_path / "home", tmp_path / "empty"
    home.mkdir()
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "HF_HOME": str(home / "hf"),
        "HF_HUB_OFFLINE": "1",
        "MPLCONFIGDIR": str(home / "mpl"),
        "PATH": f"{python.parent}{os.pathsep}{env.get('PATH', '')}",
    }
    imported = run([str(python), "-c", "import beacon; print(beacon.__file__)"], empty, env)
    assert Path(imported.stdout.strip()).is_relative_to(tmp_path / "venv"), imported.stdout

    beacon = str(python.parent / "beacon")
    assert run([beacon, "--version"], empty, env).stdout.strip() == f"beacon {__version__}"
    shown = run([beacon, "demo", "--quick", "--show-config"], empty, env).stdout
    assert shown.split()[:4] == ["setting", "type", "value", "help"] and "cold_start" in shown
    run([beacon, "configs", "cp", "grpo_tiny", "."], empty, env)
    copied = (empty / "grpo_tiny.yaml").read_bytes()
    assert copied == configs.config_path("grpo_tiny").read_bytes()

    train = [beacon, "train", "grpo", "--config", "grpo_tiny", "--set", "train.max_steps=2"]
    run([*train, "--set", "train.output_dir=runs/grpo"], empty, env)
    steps = (empty / "runs" / "grpo" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in steps] == [1, 2]
    assert (empty / "runs" / "grpo" / "checkpoint-2").is_dir()
