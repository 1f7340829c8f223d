"""`beacon.demo.run`: what the demo's processes do between stages."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

MEASURE = """
import gc, json, os
from beacon.benchmarks.synth_demo import SynthDemo, render_once
from beacon.demo.run import return_freed_memory

def resident_mb():
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

with render_once():
    items = list(SynthDemo().load(limit=200, seed=11))
    assert len(items) == 200
    del items
gc.collect()
held = resident_mb()
return_freed_memory()
print(json.dumps({"held": held, "after": resident_mb()}))
"""
"""Runs in a fresh interpreter: how much freed heap glibc still holds before the trim depends
on the process's allocation history (its mmap threshold grows with what it freed before), so
inside the whole test session the same 200 items once left 48 MB to trim (a failure), in a fresh
interpreter 100-120 MB."""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; trims glibc")
def test_freed_memory_goes_back_after_a_stage() -> None:
    """Items rendered and dropped leave their heap with the process until the trim returns it
    (glibc keeps freed memory for reuse): the demo's process held 5.9 GB after its data stage."""
    out = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    sizes = json.loads(out.stdout.splitlines()[-1])
    assert sizes["after"] < sizes["held"] - 50  # 200 items are ~120 MB of pixels and noise
