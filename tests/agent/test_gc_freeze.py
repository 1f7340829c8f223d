"""While episodes stream, the heap alive before them is frozen (`gc.freeze`): full collections
during the episodes do not walk the modules, tokenizer and engine. When the last stream ends it
is given back, so an object that died meanwhile in a reference cycle is still collected."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import gc, weakref
from PIL import Image
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
with AgentLoop(engine, None) as loop:
    for spec, traj in loop.stream([EpisodeSpec(sample, mode="notool")] * 2):
        model = None
    after = gc.get_freeze_count()
gc.collect()
print(min(seen) > 1000, after, dead() is None)
"""


def test_the_heap_is_frozen_while_episodes_stream_and_given_back_after() -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "0", "True"]
