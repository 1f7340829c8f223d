"""The scripted expert on `synth_keys`: its multi-step episodes, through the real agent loop, the
sandbox and the verifier, reach the answer by the design's crops (`demo2_design.md` §2.3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from beacon.agent.formats import THYME
from beacon.benchmarks import get_benchmark
from beacon.benchmarks.synth_demo import coords
from beacon.benchmarks.synth_keys import KEYED_HINTED, generate, grid_box
from beacon.data.eval_stages import run_trajectories
from beacon.demo.expert import (
    KEYS_PHRASES,
    ScriptedDemoExpert,
    crop_code,
    key_note,
    keys_crops,
)

from .keys_expert_run import keys_expert_run
from .test_demo_model import user_turn

FIXED = {coords(grid_box(r, c)) for r in range(3) for c in range(3)}
BENCHES = ("synth_keys", "synth_keys_told", KEYED_HINTED)


def after(reply_text: str, turns: int) -> dict:
    """The in-progress assistant message after `turns` crops, as the agent loop sends it."""
    parts = [
        {"type": "text", "text": reply_text + THYME.call_close},
        {"type": "text", "text": THYME.observation_open + "ok"},
    ] * turns
    return {"role": "assistant", "content": parts}


@pytest.mark.parametrize(("kind", "index"), [("marked", 0), ("keyed", 0), ("told", 0), ("told", 1)])
def test_the_expert_crops_the_key_notes_it_then_crops_the_named_cell(kind: str, index: int) -> None:
    s = generate(0, index, kind)
    expert = ScriptedDemoExpert([s])
    chat = user_turn(s, system=True)
    first = expert.reply(chat).text
    plan = keys_crops(s)
    assert first == f"<code>\n```python\n{crop_code(plan[0])}\n```\n"
    if kind == "marked":
        assert plan == [s.metadata["region"]]
        assert expert.reply([*chat, after(first, 1)]).text == "<answer>" + s.answer
        return
    assert plan == [s.metadata["key_box"], s.metadata["region"]]
    second = expert.reply([*chat, after(first, 1)]).text
    red = s.metadata["colour"] == "red"
    assert key_note(s) == f"Key: {s.metadata['key']}{' red.' if red else '.'}"
    assert second == f"{key_note(s)}<code>\n```python\n{crop_code(plan[1])}\n```\n"
    assert expert.reply([*chat, after(first, 2)]).text == "<answer>" + s.answer
    assert expert.reply(user_turn(s, system=False)).text == "<answer>" + s.answer


def test_on_hinted_keyed_items_the_expert_follows_the_hint_for_its_share_of_items() -> None:
    """`hint_followed`: a share of hinted `keyed` items get the key-first plan, the rest one
    crop of the target's cell (drawn per item, the same every time); unhinted `keyed`, `told`
    and `marked` items keep their plans."""
    from beacon.benchmarks.synth_demo import hinted

    items = [hinted(generate(0, i, "keyed"), KEYED_HINTED) for i in range(200)]
    expert = ScriptedDemoExpert(items, hint_followed=0.4)
    plans = [expert.plan(s) for s in items]
    followed = [p == keys_crops(s) for p, s in zip(plans, items, strict=True)]
    assert 0.3 < sum(followed) / len(items) < 0.5
    for plan, s, key_first in zip(plans, items, followed, strict=True):
        assert key_first or plan == [s.metadata["region"]]
    assert plans == [expert.plan(s) for s in items]
    first = items[followed.index(False)]
    chat = user_turn(first, system=True)
    reply = expert.reply(chat).text
    assert reply == f"<code>\n```python\n{crop_code(first.metadata['region'])}\n```\n"
    assert expert.reply([*chat, after(reply, 1)]).text == "<answer>" + first.answer
    for kind in ("keyed", "told", "marked"):
        s = generate(0, 1, kind)
        assert ScriptedDemoExpert([s], hint_followed=0.0).plan(s) == keys_crops(s)
    assert all(ScriptedDemoExpert(items).plan(s) == keys_crops(s) for s in items)


@pytest.fixture(scope="module")
def expert_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scripted expert over HTTP, in tool mode, on the mix, on `told` (half red keys) and on
    hinted `keyed` items: a real eval run."""
    limit, seed = 6, 5
    items = [s for name in BENCHES for s in get_benchmark(name).load(limit=limit, seed=seed)]
    out = tmp_path_factory.mktemp("keys-expert")
    return keys_expert_run(items, list(BENCHES), limit, seed, out)


def test_expert_episodes_reach_the_answer_by_the_designed_crops(expert_run: Path) -> None:
    done = list(run_trajectories(expert_run))
    assert len(done) == 6 * len(BENCHES)
    kinds = set()
    for episode in done:
        record, traj = episode.record, episode.trajectory
        assert record["correct"] and not record.get("error"), record
        bench = get_benchmark(record["benchmark"])
        sample = next(s for s in bench.load(limit=6, seed=5) if s.id == traj.sample_id)
        kinds.add((sample.metadata["kind"], sample.metadata["colour"]))
        boxes = [list(c.box) for call in traj.tool_calls for c in call.image_crops]
        assert boxes == keys_crops(sample)
        for call in traj.tool_calls:
            assert any(box in call.code for box in FIXED), call.code
        text = "".join(seg.text or "" for seg in traj.segments if seg.role == "generated")
        if sample.metadata["kind"] != "marked":
            assert key_note(sample) in text
        assert text.endswith(f"<answer>{sample.answer}</answer>")
    assert kinds == {("marked", "grey"), ("keyed", "grey"), ("told", "grey"), ("told", "red")}


def test_the_episodes_fixed_text_is_phrases(
    expert_run: Path,
) -> None:
    """With `KEYS_PHRASES` in the demo's vocabulary, an episode's letters all sit inside
    phrase tokens: none of the new fixed text is left one token per character."""
    from beacon.demo.pipeline import shipped_cold_start
    from beacon.engines.tokenizer import HFTokenizer
    from beacon.images import ImageStore
    from beacon.train.core.encode import encode_trajectory

    tokenizer = HFTokenizer.from_pretrained(shipped_cold_start())
    assert set(KEYS_PHRASES) <= set(tokenizer.tokenizer.get_vocab())
    store = ImageStore(expert_run / "images")
    for episode in run_trajectories(expert_run):
        ids = encode_trajectory(episode.trajectory, tokenizer, store.header).input_ids
        pieces = [tokenizer.tokenizer.decode([i]) for i in ids]
        letters = [p for p in pieces if len(p) == 1 and p.isalpha()]
        assert not letters, f"letters outside phrases: {''.join(pieces)!r}"
