"""The first stream of episodes in a process freezes what is alive before it (`gc.freeze`), so
full collections during the episodes do not walk the modules, tokenizer and engine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import gc
from PIL import Image
from beacon.agent.episode import EpisodeSpec
from beacon.agent.loop import AgentLoop
from beacon.types import Sample
from tests.agent.fakes import ScriptedEngine

class Cycle:
    def __init__(self):
        self.me = self

garbage = Cycle()
del garbage  # a cycle that only a collection frees: collected first, not frozen
before = gc.get_freeze_count()
sample = Sample(id="s1", images=[Image.new("RGB", (8, 8))], question="s1 what?", answer="B")
engine = ScriptedEngine({"s1": "<answer>B</answer>"})
with AgentLoop(engine, None) as loop:
    loop.run([EpisodeSpec(sample, mode="notool")])
    frozen = gc.get_freeze_count()
    later = [object()]  # made after the first stream: the second must not freeze it
    loop.run([EpisodeSpec(sample, mode="notool")])
tracked = any(o is later for o in gc.get_objects())  # frozen objects are in no generation
leaked = sum(type(o).__name__ == "Cycle" for o in gc.get_objects())
print(before, frozen > 1000, tracked, leaked)
"""


def test_the_first_stream_freezes_the_heap_once() -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "True", "True", "0"]
