"""The demo model's tokenizer and checkpoint, and the scripted expert's replies."""

from __future__ import annotations

import base64
import hashlib
import io
from pathlib import Path

import pytest

from beacon.agent.formats import THYME
from beacon.agent.prompts import image_lines
from beacon.benchmarks.synth_demo import coords, generate
from beacon.demo import expert as expert_module
from beacon.demo.expert import ScriptedDemoExpert, crop_box, crop_code
from beacon.demo.model import PHRASES, demo_tokenizer, make_demo_model
from beacon.engines.scripted_server import decode_data_url


@pytest.fixture(scope="module")
def tokenizer():
    return demo_tokenizer()


@pytest.mark.parametrize(
    "text",
    [
        "What digit is inside the box at ( 12,345,  6, 89)?",
        "<code>\n```python\nimage.crop(( 12,345,  6, 89)).show()\n```\n</code>",
        "any ASCII: ~!@#$%^&*()_+{}|:\"<>?`-=[]\\;',./ \t\n",
        "<answer>7</answer>",
    ],
)
def test_text_round_trips_exactly(tokenizer, text: str) -> None:
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text


def test_phrases_are_one_token_and_digits_one_each(tokenizer) -> None:
    for phrase in PHRASES:
        assert len(tokenizer.encode(phrase, add_special_tokens=False)) == 1, phrase
    box = coords((5, 42, 300, 447))
    assert len(tokenizer.encode(box, add_special_tokens=False)) == len(box)


def test_a_sessions_path_and_size_lines_are_one_token_each(tokenizer) -> None:
    """The lines a tool-mode prompt names its image with, as a real sandbox session writes
    them for a `synth_demo` item (a PIL image): one phrase each, not ~50 characters."""
    from beacon.sandbox import Sandbox, SandboxConfig

    image = generate(1, 0).images[0]
    with Sandbox(SandboxConfig(num_workers=1)) as sandbox, sandbox.session([image]) as session:
        lines = image_lines(session.image_paths, [image])
    assert len(tokenizer.encode(lines, add_special_tokens=False)) == 3  # path, "\n", size


def test_checkpoint_is_deterministic_per_seed(tmp_path: Path) -> None:
    def digest(folder: Path) -> str:
        return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()

    a = make_demo_model(tmp_path / "a", seed=0)
    b = make_demo_model(tmp_path / "b", seed=0)
    c = make_demo_model(tmp_path / "c", seed=1)
    assert digest(a) == digest(b) != digest(c)
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(a)
    assert 1_000_000 < sum(p.numel() for p in model.parameters()) < 2_000_000


def user_turn(sample, system: bool) -> list[dict]:
    """The chat an OpenAI-compatible client sends: the image as a PNG data URL."""
    png = io.BytesIO()
    sample.images[0].save(png, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()
    content = [
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "text", "text": sample.question},
    ]
    messages = [{"role": "user", "content": content}]
    return [{"role": "system", "content": THYME.system_prompt}, *messages] if system else messages


def test_expert_crops_hard_items_and_answers_after_the_observation() -> None:
    items = [generate(0, i) for i in range(8)]
    expert = ScriptedDemoExpert(items, tool_bias=0.0)
    for s in items:
        reply = expert.reply(user_turn(s, system=True))
        if s.metadata["difficulty"] == "easy":
            assert reply.text == "<answer>" + s.answer
            continue
        assert crop_code(crop_box(s)) in reply.text
        box = crop_box(s)
        region = s.metadata["region"]
        assert (
            box[0] <= region[0]
            and box[1] <= region[1]
            and region[2] <= box[2]
            and region[3] <= box[3]
        )
        observed = {
            "role": "assistant",
            "content": [
                {"type": "text", "text": reply.text + THYME.call_close + THYME.observation_open}
            ],
        }
        assert expert.reply([*user_turn(s, system=True), observed]).text == "<answer>" + s.answer


def test_expert_is_tool_biased_in_tool_mode_and_direct_without_tools() -> None:
    items = [generate(1, i) for i in range(200)]
    expert = ScriptedDemoExpert(items, tool_bias=0.9, seed=3)
    easy = [s for s in items if s.metadata["difficulty"] == "easy"]
    crops = sum("image.crop" in expert.reply(user_turn(s, system=True)).text for s in easy)
    assert 0.8 <= crops / len(easy) <= 0.97
    assert all(expert.reply(user_turn(s, system=False)).text.startswith("<answer>") for s in items)


def test_expert_decodes_each_image_url_once(monkeypatch: pytest.MonkeyPatch) -> None:
    items = [generate(2, i) for i in range(4)]
    expert = ScriptedDemoExpert(items)
    decoded = []
    monkeypatch.setattr(
        expert_module, "decode_data_url", lambda u: decoded.append(1) or decode_data_url(u)
    )
    for s in items * 3:  # three turns of each item's episode (or its tool and notool runs)
        assert expert.identify(user_turn(s, system=True)) is s
    assert len(decoded) == len(items)
    other = generate(2, 99)
    with pytest.raises(KeyError, match="not one of the synth_demo items"):
        expert.identify(user_turn(other, system=True))
