"""Spares: each warms up (a rehearsal) before its request, and runs the request's code like any
other process. Speed is measured in benchmarks/sandbox_latency.py; these tests check what the
warm-up must and must not leave behind, and the settings the speed relies on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import beacon.sandbox
from beacon.sandbox import Sandbox
from beacon.sandbox.jail import MALLOC_TUNABLES, WORKER_CAPABILITIES

from .helpers import make_image, tight_config

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="quotas and capabilities need root")

REHEARSE = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
import matplotlib.pyplot as plt
from PIL import Image
import child as episode, wire
pristine = (Image.Image.show, plt.show, Image.Image.crop, Image.Image.resize, Image.Image.save,
            Image.open)
fds = sorted(os.listdir("/proc/self/fd"))
parts = episode.rehearse(sys.argv[2])
frame = wire.decode_frame(b"".join(parts), wire.FrameLimits(1 << 16, 4, 1 << 16))
meta = frame.header
print(json.dumps({
    "stdout": meta["stdout"], "error": meta["error"], "notes": meta["notes"],
    "images": meta["images"], "pixels": [len(b) for b in frame.blobs],
    "restored": (Image.Image.show, plt.show, Image.Image.crop, Image.Image.resize,
                 Image.Image.save, Image.open) == pristine,
    "cwd": os.getcwd(),
    "fds_kept": sorted(os.listdir("/proc/self/fd")) == fds,
}))
"""


def test_rehearsal_runs_a_call_in_miniature_and_undoes_its_patches(tmp_path: Path) -> None:
    """In a process of its own: the rehearsal patches Image.show, plt.show, Image.crop (and
    the crop tracking's resize, save and open), and undoes them."""
    folder = os.path.dirname(beacon.sandbox.__file__)
    (tmp_path / "scratch").mkdir()
    out = subprocess.run(
        [sys.executable, "-c", REHEARSE, folder, str(tmp_path / "scratch")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(out.stdout)
    assert got["stdout"].startswith(str(tmp_path / "scratch" / "rehearsal-"))
    assert got["stdout"].endswith("/rehearsal.png (1, 1)\n")
    assert got["error"] is None and got["notes"] == []
    # its image went to a file in its folder (removed with it), as a real call's would, with
    # the box it was cropped from
    crop = [0, 0, 0, 2, 2]  # input image 0, (x0, y0, x1, y1)
    assert got["images"] == [{"mode": "RGB", "width": 1, "height": 1, "crop": crop, "file": True}]
    assert got["pixels"] == []
    assert got["restored"] and got["fds_kept"]
    assert got["cwd"] == str(tmp_path)
    assert list((tmp_path / "scratch").iterdir()) == []  # its folder is gone


FAULTS = """
import numpy as np
def faults():
    return int(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[7])
before = faults()
np.ones(8 << 20, np.uint8)
print(faults() - before)
"""


def test_the_codes_first_allocations_reuse_the_spares_warm_heap() -> None:
    """A spare faults in heap for the code while it waits (`worker.warm_up`): 8 MB of new
    memory then costs the code a few page faults, not one per 4 KB page (2048)."""
    with Sandbox(tight_config(num_workers=1)) as sb, sb.session(images=[make_image()]) as s:
        results = []
        for _ in range(3):
            time.sleep(0.3)  # the spare warms up while the worker is idle
            results.append(s.run(FAULTS))
    assert all(r.ok for r in results), [r.error for r in results]
    assert min(int(r.stdout) for r in results) < 100, [r.stdout for r in results]


def test_the_code_gets_the_workers_malloc_settings() -> None:
    """The spare's warmed heap serves the code only with these glibc settings in force."""
    with Sandbox(tight_config(num_workers=1)) as sb, sb.session(images=[make_image()]) as s:
        r = s.run("print(os.environ.get('GLIBC_TUNABLES'))")
    assert r.ok, r.error
    assert r.stdout == f"{MALLOC_TUNABLES}\n"


PROBE = """
import gc, sys
print(os.environ.get("GLIBC_TUNABLES") == EXPECTED, gc.get_freeze_count() > 0,
      sys.modules["tempfile"]._name_sequence is not None)
"""


@pytest.mark.parametrize("tricks", [True, False])
def test_the_speed_switch_turns_the_workers_tricks_on_and_off(tricks: bool) -> None:
    """`speed_tricks=False`: glibc's malloc defaults, nothing frozen before the template forks,
    no rehearsal in the spare (the rehearsal's folder draws tempfile's first random name, which
    a call of its own does not), no huge pages in the session's tmpfs. With the switch on, the
    same probes see each trick (a spare may be asked before it rehearses: one of three calls)."""
    probe = PROBE.replace("EXPECTED", repr(MALLOC_TUNABLES))
    config = tight_config(num_workers=1, speed_tricks=tricks)
    with Sandbox(config) as sb, sb.session(images=[make_image()]) as s:
        results = []
        for _ in range(3):
            time.sleep(0.3)  # the spare warms up while the worker is idle
            results.append(s.run(probe))
        mounts = Path("/proc/self/mounts").read_text().splitlines()
        options = [line.split()[3] for line in mounts if line.split()[1] == s.dir]
    assert all(r.ok for r in results), [r.error for r in results]
    seen = [r.stdout.split() for r in results]
    assert all(got[:2] == [str(tricks)] * 2 for got in seen), seen
    assert any(got[2] == "True" for got in seen) is tricks, seen
    if options and Path("/sys/kernel/mm/transparent_hugepage").exists():
        assert ("huge=within_size" in options[0].split(",")) is tricks


@needs_root
def test_session_folders_keep_large_files_on_huge_pages() -> None:
    """The input pixels are mapped by every call; on huge pages a crop of a large input faults
    once per 2 MB instead of once per 64 KB."""
    if not Path("/sys/kernel/mm/transparent_hugepage").exists():
        pytest.skip("this kernel has no transparent huge pages")
    with Sandbox(tight_config(num_workers=1)) as sb, sb.session(images=[make_image()]) as s:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
        options = [line.split()[3] for line in mounts if line.split()[1] == s.dir]
    assert len(options) == 1
    assert "huge=within_size" in options[0].split(",")


@needs_root
def test_as_root_the_worker_keeps_only_its_capabilities() -> None:
    """As root bwrap keeps the worker only what it needs for the sessions' folders and uids."""
    with Sandbox(tight_config(num_workers=1)) as sb:
        status = Path(f"/proc/{sb.worker_pids()[0]}/status").read_text().splitlines()
    effective = [int(line.split()[1], 16) for line in status if line.startswith("CapEff")]
    assert effective == [sum(1 << bit for bit in WORKER_CAPABILITIES.values())]
