"""While episodes stream, the heap alive before them is frozen (`gc.freeze`): full collections
during the episodes do not walk the modules, tokenizer and engine. When the last stream ends it
is given back, so an object that died meanwhile in a reference cycle is still collected.
`agent.freeze_heap=false` leaves the heap unfrozen."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import gc, sys, weakref
from PIL import Image
from beacon.agent.config import AgentConfig
from beacon.agent.episode import EpisodeSpec
from beacon.agent.loop import AgentLoop
from beacon.types import Sample
from tests.agent.fakes import ScriptedEngine

class Cycle:
    def __init__(self):
        self.me = self

class Counting(ScriptedEngine):
    def generate(self, requests):
        seen.append(gc.get_freeze_count())
        return super().generate(requests)

seen = []
model = Cycle()  # alive when the stream starts, dropped while it runs
dead = weakref.ref(model)
sample = Sample(id="s1", images=[Image.new("RGB", (8, 8))], question="s1 what?", answer="B")
engine = Counting({"s1": "<answer>B</answer>"})
with AgentLoop(engine, None, AgentConfig(freeze_heap=sys.argv[1] == "on")) as loop:
    for spec, traj in loop.stream([EpisodeSpec(sample, mode="notool")] * 2):
        model = None
    after = gc.get_freeze_count()
gc.collect()
print(min(seen) > 1000, after, dead() is None)
"""


def _run(switch: str) -> list[str]:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, switch],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_the_heap_is_frozen_while_episodes_stream_and_given_back_after() -> None:
    assert _run("on") == ["True", "0", "True"]


def test_the_switch_leaves_the_heap_unfrozen() -> None:
    assert _run("off") == ["False", "0", "True"]
