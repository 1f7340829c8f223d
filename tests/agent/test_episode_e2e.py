"""End-to-end episodes on the tiny model: code runs in the real sandbox and its image goes back
into the model's next turn, in both formats and all three modes."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image

from beacon.agent.config import AgentConfig
from beacon.agent.episode import EpisodeSpec
from beacon.agent.loop import AgentLoop
from beacon.engines.hf import HFEngine
from beacon.rollout import check_trajectory
from beacon.sandbox import Sandbox
from beacon.types import ImageCrop, Sample, Trajectory

CODE = "print(image.size)\nimage.crop((0, 0, 40, 30)).show()"
THYME_TURNS = (
    "Let me zoom in. <code>\n```python\n" + CODE + "\n```\n</code>",
    "The crop shows it. <answer>B</answer>",
)
TOOL_CALL_TURNS = (
    'Zoom. <tool_call>{"name": "python", "arguments": {"code": "print(image.size)\\n'
    'image.crop((0, 0, 40, 30)).show()"}}</tool_call>',
    "Done. <answer>B</answer>",
)


@pytest.fixture(scope="module")
def engine(tiny_model_path: Path) -> HFEngine:
    return HFEngine(tiny_model_path, batch_size=4)


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    with Sandbox() as sb:
        yield sb


@pytest.fixture
def sample() -> Sample:
    image = Image.new("RGB", (96, 64), (200, 30, 30))
    return Sample(id="s1", images=[image], question="What color?", answer="B")


def script(engine: HFEngine, turn_script: type, turns: tuple[str, ...], marker: str) -> None:
    tok = engine.tokenizer
    ids = [tok.encode(t) for t in turns]
    ids[-1] = [*ids[-1], *tok.eos_token_ids[-1:]]
    engine.logits_processors = [turn_script(ids, tok.encode(marker)[0])]


def check_token_contract(traj: Trajectory, engine: HFEngine) -> None:
    """Ids reproduce each segment's text; only generated tokens carry loss and log-probs."""
    tok = engine.tokenizer
    for seg in traj.segments:
        assert len(seg.loss_mask) == len(seg.token_ids) > 0
        assert set(seg.loss_mask) == ({1} if seg.role == "generated" else {0})
        if seg.role == "generated":
            assert tok.decode(seg.token_ids) == seg.text
            assert seg.logprobs is not None and len(seg.logprobs) == len(seg.token_ids)
            assert all(lp <= 0.0 for lp in seg.logprobs)
        else:
            assert seg.logprobs is None


def image_pad_count(traj: Trajectory, engine: HFEngine) -> int:
    pad = engine.tokenizer.encode("<|image_pad|>", [Image.new("RGB", (28, 28))])
    pad_id = max(set(pad), key=pad.count)
    return traj.token_ids.count(pad_id)


@pytest.mark.parametrize(
    ("fmt", "turns", "marker"),
    [
        ("thyme", THYME_TURNS, "</sandbox_output>"),
        ("tool_call", TOOL_CALL_TURNS, "</tool_response>"),
    ],
)
def test_tool_episode_executes_code_and_feeds_the_crop_back(
    engine: HFEngine, sandbox: Sandbox, sample: Sample, turn_script: type, fmt: str, turns, marker
) -> None:
    script(engine, turn_script, turns, marker)
    with AgentLoop(engine, sandbox, AgentConfig(format=fmt, max_new_tokens_per_turn=200)) as loop:
        (traj,) = loop.run([EpisodeSpec(sample, mode="tool")])

    assert traj.finish_reason == "answer", traj.error
    assert traj.final_answer == "B"
    assert [s.role for s in traj.segments] == [
        "prompt",
        "generated",
        "generated",
        "observation",
        "generated",
    ]
    assert [s.kind for s in traj.segments[1:3]] == ["text", "code"]
    assert traj.segments[2].text.startswith("\n```python" if fmt == "thyme" else '{"name"')
    (call,) = traj.tool_calls
    assert call.executed and call.ok, call.error
    assert "(96, 64)" in call.stdout
    observation = traj.segments[3]
    assert len(observation.images) == 1 and "(96, 64)" in observation.text
    assert engine.tokenizer.encode(observation.text, [Image.new("RGB", (40, 30))]) == (
        observation.token_ids
    )
    # The crop went back to the model: the context holds the pads of both images.
    two_images = engine.tokenizer.image_token_count(sample.images[0])
    two_images += engine.tokenizer.image_token_count(Image.new("RGB", (40, 30)))
    assert image_pad_count(traj, engine) == two_images
    assert len(traj.evidence) == 1 and traj.evidence[0].images_available == 2
    assert traj.evidence[0].token_position == sum(len(s.token_ids) for s in traj.segments[:4])
    check_token_contract(traj, engine)
    assert traj.used_tool and traj.num_tool_calls == 1 and traj.code_tokens > 0


def test_notool_records_attempted_code_but_runs_nothing(
    engine: HFEngine, sample: Sample, turn_script: type
) -> None:
    script(engine, turn_script, (THYME_TURNS[0] + " <answer>A</answer>",), "</sandbox_output>")
    with AgentLoop(engine, None, AgentConfig(max_new_tokens_per_turn=200)) as loop:
        (traj,) = loop.run([EpisodeSpec(sample, mode="notool")])
    assert traj.finish_reason == "answer" and traj.final_answer == "A"
    assert [s.role for s in traj.segments] == ["prompt", "generated"]
    assert traj.attempted_tool_calls == 1 and not traj.used_tool
    assert traj.tool_calls[0].executed is False
    prompt = traj.segments[0].text
    assert "User Image Path" not in prompt and "<code>" not in prompt
    check_token_contract(traj, engine)


def test_hinted_mode_keeps_both_prompts(
    engine: HFEngine, sandbox: Sandbox, sample: Sample, turn_script: type
) -> None:
    script(engine, turn_script, THYME_TURNS, "</sandbox_output>")
    spec = EpisodeSpec(sample, mode="hinted", hint="Crop the top-left corner first.")
    with AgentLoop(engine, sandbox, AgentConfig(max_new_tokens_per_turn=200)) as loop:
        (traj,) = loop.run([spec])
    assert traj.finish_reason == "answer"
    hinted, original = traj.segments[0], traj.original_prompt
    assert "Hint: Crop the top-left corner first." in hinted.text
    assert original is not None and "Hint:" not in original.text
    assert original.token_ids == engine.tokenizer.encode(original.text, [sample.images[0]])
    assert traj.hint == spec.hint


def test_code_temperature_generates_code_in_its_own_segment(
    engine: HFEngine, sandbox: Sandbox, sample: Sample, turn_script: type
) -> None:
    script(engine, turn_script, THYME_TURNS, "</sandbox_output>")
    config = AgentConfig(max_new_tokens_per_turn=200, temperature=1.0, code_temperature=0.0)
    with AgentLoop(engine, sandbox, config) as loop:
        (traj,) = loop.run([EpisodeSpec(sample, mode="tool", seed=3)])
    assert traj.finish_reason == "answer"
    code = [s for s in traj.segments if s.kind == "code"]
    assert len(code) == 1 and code[0].text.startswith("\n```python")
    assert code[0].text.endswith("</code>") and traj.segments[1].text.endswith("<code>")
    check_token_contract(traj, engine)


def test_batch_of_episodes_keeps_results_apart(
    engine: HFEngine, sandbox: Sandbox, turn_script: type
) -> None:
    script(engine, turn_script, THYME_TURNS, "</sandbox_output>")
    samples = [
        Sample(
            id=str(i),
            images=[Image.new("RGB", (50 + 10 * i, 40), (i, i, i))],
            question="?",
            answer="B",
        )
        for i in range(5)
    ]
    with AgentLoop(engine, sandbox, AgentConfig(max_new_tokens_per_turn=200)) as loop:
        trajectories = loop.run([EpisodeSpec(s, mode="tool") for s in samples], max_active=3)
    for sample, traj in zip(samples, trajectories, strict=True):
        assert traj.sample_id == sample.id
        assert f"({50 + 10 * int(sample.id)}, 40)" in traj.tool_calls[0].stdout


def local_and_served(
    engine: HFEngine, sandbox: Sandbox, sample: Sample, turn_script: type
) -> tuple[Trajectory, Trajectory]:
    """The scripted Thyme episode of `sample` run on the hf engine, then through `beacon serve`
    and the openai engine on the same engine."""
    from beacon.engines.openai import OpenAIEngine
    from beacon.engines.serve import serving

    script(engine, turn_script, THYME_TURNS, "</sandbox_output>")
    config = AgentConfig(max_new_tokens_per_turn=200)
    with AgentLoop(engine, sandbox, config) as loop:
        (local,) = loop.run([EpisodeSpec(sample, mode="tool")])
    with serving(engine) as base_url:
        client = OpenAIEngine(base_url=base_url, model="beacon", tokenizer=engine.tokenizer)
        with AgentLoop(client, sandbox, config) as loop:
            (served,) = loop.run([EpisodeSpec(sample, mode="tool")])
    return local, served


def test_served_episode_has_the_same_tokens_as_local(
    engine: HFEngine, sandbox: Sandbox, sample: Sample, turn_script: type
) -> None:
    """`beacon serve` + the openai engine reproduce the hf engine's episode token for token,
    including the observation image inside the assistant turn (Thyme's shape)."""
    local, served = local_and_served(engine, sandbox, sample, turn_script)
    assert served.finish_reason == local.finish_reason == "answer"
    assert [s.role for s in served.segments] == [s.role for s in local.segments]
    assert served.token_ids == local.token_ids
    # recorded while the server generated (deferred records), the same as recorded at once
    assert [s.images for s in served.segments] == [s.images for s in local.segments]
    assert served.evidence == local.evidence
    untimed = [[replace(c, elapsed_s=0.0) for c in t.tool_calls] for t in (served, local)]
    assert untimed[0] == untimed[1]
    for ours, theirs in zip(served.segments, local.segments, strict=True):
        if ours.logprobs is not None:
            assert ours.logprobs == pytest.approx(theirs.logprobs, abs=1e-4)


def test_paths_shown_to_the_model_are_stable_and_usable(
    engine: HFEngine, sandbox: Sandbox, sample: Sample, turn_script: type
) -> None:
    """The prompt names the image under the sandbox's fixed folder /mnt/data (so runs are
    reproducible); code that opens that path and saves under Thyme's folder works."""
    code = (
        "p = os.listdir('/mnt/data/images')[0]\n"
        "im = Image.open('/mnt/data/images/' + p)\n"
        "out = '/mnt/data/temp_processed_images/zoom.png'\n"
        "im.resize((20, 10)).save(out)\n"
        "print(os.path.exists(out), image_path)"
    )
    turns = ("Zoom. <code>\n```python\n" + code + "\n```\n</code>", THYME_TURNS[1])
    script(engine, turn_script, turns, "</sandbox_output>")
    runs = []
    for _ in range(2):
        with AgentLoop(engine, sandbox, AgentConfig(max_new_tokens_per_turn=300)) as loop:
            runs.append(loop.run([EpisodeSpec(sample, mode="tool")])[0])
    first, second = runs
    assert 'User Image Path: "/mnt/data/images/image_0.' in first.segments[0].text
    (call,) = first.tool_calls
    assert call.ok, call.error
    assert call.stdout.startswith("True /mnt/data/images/image_0.")
    assert first.token_ids == second.token_ids


def test_seeded_episodes_sample_the_same_tokens_at_any_concurrency(engine: HFEngine) -> None:
    """Issue 7 §3: at temperature 1, a re-run at another concurrency (other batches, other
    order) samples the same tokens, because each request has its own generator and seed."""
    engine.logits_processors = []
    samples = [
        Sample(id=str(i), images=[Image.new("RGB", (40 + 8 * i, 32), (9 * i, 0, 0))], question="?",
               answer="B")
        for i in range(5)
    ]  # fmt: skip
    specs = [EpisodeSpec(s, mode="notool", seed=100 + i) for i, s in enumerate(samples)]
    config = AgentConfig(temperature=1.0, max_new_tokens_per_turn=12, max_total_new_tokens=12)
    runs = []
    for concurrency in (1, 4):
        with AgentLoop(engine, None, config) as loop:
            runs.append([t.token_ids for t in loop.run(specs, max_active=concurrency)])
    assert runs[0] == runs[1]
    assert len({tuple(ids) for ids in runs[0]}) == len(specs)


def test_episodes_pass_the_trainers_check_locally_and_served(
    engine: HFEngine, sandbox: Sandbox, sample: Sample, turn_script: type
) -> None:
    """Every engine call's view is recorded, the crop knows its box, and the trajectory is what
    the engine saw, also when `beacon serve` rendered the context itself; an altered copy is
    not."""
    local, served = local_and_served(engine, sandbox, sample, turn_script)
    pad = engine.tokenizer.image_token_id
    for traj in (local, served):
        views = [s.engine for s in traj.segments if s.engine is not None]
        assert [v.images for v in views] == [1, 2] and views[-1].tokens == len(traj.token_ids)
        assert traj.tool_calls[0].image_crops == [ImageCrop(0, (0, 0, 40, 30))]
        counts = [engine.tokenizer.image_token_count(sample.images[0])]
        counts.append(engine.tokenizer.image_token_count(Image.new("RGB", (40, 30))))
        tokens = dict(zip([k for s in traj.segments for k in s.images], counts, strict=True))
        assert check_trajectory(traj, pad, tokens.__getitem__) is None
    altered = copy.deepcopy(local)
    altered.segments[3].token_ids[1] += 1
    assert check_trajectory(altered, pad).reason == "token_ids"
