"""benchmarks/demo2_pilot.py classifies each episode's first crop and the key-then-cell procedure
from the recorded crop boxes: the figures of the demo II pilot. Pinned on hand-made cases and on
the scripted expert's real episodes (right every time, key first on `keyed` and `told`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from beacon.benchmarks.synth_keys import generate, grid_box
from beacon.data.scripted_expert import create_scripted_app
from beacon.demo.expert import MODEL_NAME, ScriptedDemoExpert
from beacon.engines.config import EngineConfig
from beacon.engines.serve import run_app_in_thread

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture()
def pilot(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import demo2_pilot

    return demo2_pilot


def test_first_crop_names_the_box_the_episode_cropped_first(pilot) -> None:
    s = generate(0, 0, "keyed")
    m = s.metadata
    other = next(b for b in m["cell_boxes"] if b != m["region"])
    assert pilot.first_crop(s, []) == "none"
    assert pilot.first_crop(s, [tuple(m["key_box"]), tuple(m["region"])]) == "key"
    assert pilot.first_crop(s, [tuple(m["region"])]) == "target"
    assert pilot.first_crop(s, [tuple(other)]) == "other cell"
    assert pilot.first_crop(s, [(149, 28, 448, 149)]) == "elsewhere"
    assert tuple(m["key_box"]) == grid_box(1, 1)


def test_tally_of_the_expert_is_right_and_key_first(pilot, tmp_path: Path) -> None:
    benches = ["synth_keys_marked", "synth_keys_keyed", "synth_keys_told"]
    items = pilot.load_items(benches, 4, 3)
    server = run_app_in_thread(
        create_scripted_app(ScriptedDemoExpert(items.values()), model_name=MODEL_NAME)
    )
    try:
        engine = EngineConfig(name="openai", model=MODEL_NAME, base_url=server.base_url)
        run = pilot.evaluate(tmp_path / "run", Path(), benches, 4, seed=3, engine=engine)
    finally:
        server.stop()
    counts = pilot.tally(run, items)
    assert set(counts) == {*benches, "synth_keys_told (grey)", "synth_keys_told (red)"}
    for name, c in counts.items():
        assert c["right"] == c["episodes"] > 0, name
        first = "target" if name == "synth_keys_marked" else "key"
        assert c[f"first: {first}"] == c["episodes"], name
        assert c["key then cell"] == (0 if first == "target" else c["episodes"]), name
