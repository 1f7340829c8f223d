"""Teacher conditioning: the reflection text, the conditioned chat and the alignment check."""

from __future__ import annotations

from PIL import Image

from beacon.train.opd.assemble import check_and_assemble
from beacon.train.opd.critic_schema import observed_states
from beacon.train.opd.score import (
    check_alignment,
    check_reencoding,
    condition_messages,
    reflection_text,
)

from .helpers import critic_output, make_trajectory


def reflections():
    group = [make_trajectory([["k1"]]), make_trajectory([], answer="B")]
    states = observed_states(group)
    out = critic_output({"R1_S1": ["R1_S1_IMG1"]}, ["CORRECT", "ACQUIRE"], ["", "cropped the sky"])
    return check_and_assemble(out, states, [True, False], frozenset(states.image_keys)).reflections


def test_reflection_text_has_anchor_and_break_point() -> None:
    correct, wrong = reflections()
    text = reflection_text(wrong)
    assert "1 supporting image(s)" in text
    assert "Visual fact: the plate reads S QT 911" in text
    assert "Grounding rule: the option whose text" in text
    assert "first broken link ACQUIRE. Discrepancy: cropped the sky" in text
    assert "final answer is correct" in reflection_text(correct)


def test_condition_messages_places_text_and_images() -> None:
    orig, crop, support = (Image.new("RGB", (2, 2)) for _ in range(3))
    messages = [
        {"role": "system", "content": "sys"},
        {
            "role": "user",
            "content": [{"type": "image", "image": orig}, {"type": "text", "text": "Q"}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "<code>..</code>"}]},
        {"role": "user", "content": [{"type": "image", "image": crop}]},
    ]
    out = condition_messages(messages, "REFLECTION", [support])
    first = out[1]["content"]
    assert [p["type"] for p in first] == ["image", "image", "text", "text"]
    assert first[0]["image"] is orig and first[1]["image"] is support  # after the original
    assert first[-1]["text"].endswith("REFLECTION")  # appended at the end
    assert out[3] == messages[3]  # the trajectory's own images stay where they were
    assert len(messages[1]["content"]) == 2  # the input is not mutated


def test_condition_messages_with_string_content() -> None:
    out = condition_messages([{"role": "user", "content": "Q"}], "R", [])
    assert out[0]["content"] == [{"type": "text", "text": "Q"}, {"type": "text", "text": "\n\nR"}]


def test_alignment_check() -> None:
    assert check_alignment([1, 2, 3], [1, 2, 3]).aligned
    bad = check_alignment([1, 2, 3], [1, 9, 3])
    assert not bad.aligned and bad.first_mismatch == 1
    short = check_alignment([1, 2, 3], [1, 2])
    assert not short.aligned and "length" in short.reason
    assert check_reencoding([7, 7, 7, 1, 2], 3, [1, 2]).aligned
    assert not check_reencoding([7, 7, 1, 2], 3, [1, 2]).aligned
