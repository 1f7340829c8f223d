"""The scripted critic on `synth_keys` (design §2.4): groups of expert-like rollouts, run through
the real agent loop and sandbox, sent through the trainer's request builder, answered by the
scripted critic and checked by Algorithm 4."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.agent.fakes import ScriptedEngine

from beacon.agent.episode import EpisodeSpec
from beacon.agent.loop import AgentLoop
from beacon.benchmarks.synth_keys import KEYED_HINT, generate
from beacon.demo.expert import KEYS_PHRASES, crop_code, key_note, keys_agent
from beacon.engines.serve import run_app_in_thread
from beacon.images import ImageStore
from beacon.sandbox import Sandbox
from beacon.train.opd.assemble import Assembly, check_and_assemble
from beacon.train.opd.critic import HttpCritic, ask_critic, build_critic_request
from beacon.train.opd.critic_schema import CriticOutput, observed_states, parse_critic_output
from beacon.train.opd.score import reflection_text
from beacon.train.opd.scripted_critic import (
    KEYS_GROUNDING,
    KEYS_REFLECTION_PHRASES,
    ScriptedCritic,
    create_app,
    first_image,
    request_text,
)
from beacon.types import Sample, Trajectory

from .helpers import labels

RED = generate(0, 1, "told")  # key 2, red: names cell 7
GREY = generate(0, 0, "told")
KEYED = generate(0, 0, "keyed")
MARKED = generate(0, 0, "marked")


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox() as sb:
        yield sb


@pytest.fixture
def store(tmp_path: Path) -> ImageStore:
    return ImageStore(tmp_path / "images")


def cell(sample: Sample, n: int) -> list[int]:
    """Cell `n`'s box (reading order, 1..8)."""
    return sample.metadata["cell_boxes"][n - 1]


def script(boxes: list[list[int]], note: str, answer: str | None) -> str:
    """A rollout as the expert writes it: each crop as its own code turn, `note` before the
    second, then the answer (or, `answer` None, a closing remark without one)."""
    turns = [
        f"{note if k == 1 else ''}<code>\n```python\n{crop_code(box)}\n```\n</code>"
        for k, box in enumerate(boxes)
    ]
    end = "I cannot tell." if answer is None else f"<answer>{answer}</answer>"
    return "".join(turns) + end


def run(
    sandbox: Sandbox, store: ImageStore, sample: Sample, scripts: list[str]
) -> list[Trajectory]:
    """One real episode per script (agent loop, sandbox, image store), in group order; the
    fake engine finds its script by the question's first word."""
    out = []
    for text in scripts:
        engine = ScriptedEngine({sample.question.split()[0]: text})
        with AgentLoop(engine, sandbox, keys_agent(), store=store) as loop:
            out.extend(loop.run([EpisodeSpec(sample, mode="tool")]))
    return out


def expert(sample: Sample) -> str:
    """The expert's own rollout: the key, its note, the named cell, the answer."""
    return script(
        [sample.metadata["key_box"], sample.metadata["region"]], key_note(sample), sample.answer
    )


def wrong(sample: Sample) -> str:
    return str((int(sample.answer) + 1) % 10)


def ask(
    sample: Sample, trajectories: list[Trajectory], store: ImageStore, max_tool_images: int = 8
) -> tuple[Assembly, CriticOutput]:
    """The trainer's request for the group, the scripted critic's reply to the text and image
    the HTTP client would send, and Algorithm 4 on it."""
    correct = labels(trajectories, sample)
    states = observed_states(trajectories)
    request = build_critic_request(
        sample.question, sample.answer, trajectories, correct, states, store.get, max_tool_images
    )
    messages = HttpCritic("http://unused/v1", "scripted-critic").request_body(request)["messages"]
    answer = ScriptedCritic([sample]).answer(request_text(messages), first_image(messages))
    output = parse_critic_output(json.dumps(answer))
    assembly = check_and_assemble(output, states, correct, request.shown_image_ids)
    return assembly, output


def stages(assembly: Assembly) -> list[tuple[str, str]]:
    return [(r.break_point.stage, r.break_point.discrepancy) for r in assembly.reflections]


def sufficient(output: CriticOutput) -> dict[str, list[str]]:
    return {s.state_id: list(s.support_image_ids) for s in output.sufficient_states}


def test_a_red_key_mapped_as_grey_is_acquire_naming_cell_9_minus_k(sandbox, store) -> None:
    k = RED.metadata["key"]
    assert RED.metadata["colour"] == "red" and RED.metadata["target"] == 9 - k
    mapped = script(
        [RED.metadata["key_box"], cell(RED, k)], f"Key: {k}.", RED.metadata["digits"][k - 1]
    )
    group = run(sandbox, store, RED, [expert(RED), mapped])
    assembly, output = ask(RED, group, store)
    assert sufficient(output) == {"R1_S2": ["R1_S1_IMG1", "R1_S2_IMG1"]}
    assert assembly.status == "complete" and assembly.reconciled == 0
    assert stages(assembly) == [
        ("CORRECT", ""),
        ("ACQUIRE", f"cropped cell {k}; the red key names cell {9 - k}"),
    ]
    anchor = assembly.reflections[1].anchor
    assert anchor.state.state_id == "R1_S2" and len(anchor.support_image_keys) == 2
    assert anchor.reading.query_slot == RED.question
    assert anchor.reading.observed_value == RED.answer
    assert json.loads(anchor.reading.visual_fact.removeprefix("the image shows ")) == {
        "key": k,
        "colour": "red",
        "cell": 9 - k,
        "digit": int(RED.answer),
    }
    assert anchor.grounding.rule == KEYS_GROUNDING["told"]
    assert "(cell 9 - key)" in anchor.grounding.rule


def test_a_lucky_crop_of_the_right_cell_without_the_key_is_not_sufficient(sandbox, store) -> None:
    target = GREY.metadata["region"]
    group = run(
        sandbox,
        store,
        GREY,
        [
            expert(GREY),
            script([target], "", GREY.answer),  # lucky and right: CORRECT, yet no evidence
            script([target], "", wrong(GREY)),
            script([], "", wrong(GREY)),
        ],
    )
    assembly, output = ask(GREY, group, store)
    assert list(sufficient(output)) == ["R1_S2"]
    t = GREY.metadata["target"]
    assert stages(assembly) == [
        ("CORRECT", ""),
        ("CORRECT", ""),
        ("ACQUIRE", f"cropped cell {t} without the key; the key names cell {t}"),
        ("ACQUIRE", f"cropped nothing; the key names cell {t}"),
    ]
    assert assembly.reflections[1].anchor.state.state_id == "R1_S2"  # a sibling's view
    assert assembly.reconciled == 0


def test_a_misread_key_is_read_only_when_the_rollout_still_owns_the_evidence(
    sandbox, store
) -> None:
    meta = KEYED.metadata
    k, t = meta["key"], meta["target"]
    other = k % 8 + 1
    group = run(
        sandbox,
        store,
        KEYED,
        [
            expert(KEYED),
            script([meta["key_box"], cell(KEYED, other)], f"Key: {other}.", wrong(KEYED)),
            script([meta["key_box"], meta["region"]], f"Key: {other}.", wrong(KEYED)),
            script([meta["key_box"], meta["region"]], key_note(KEYED), wrong(KEYED)),
        ],
    )
    assembly, output = ask(KEYED, group, store)
    assert list(sufficient(output)) == ["R1_S2", "R3_S2", "R4_S2"]
    misread = f"noted key {other}, but the key is {k} and names cell {t}"
    assert stages(assembly) == [
        ("CORRECT", ""),
        ("ACQUIRE", misread),  # the misread sent it to another cell: it owns no evidence
        ("READ", misread),
        ("READ", f"answered {wrong(KEYED)}; cell {t} shows {KEYED.answer}"),
    ]
    assert assembly.reconciled == 0
    assert assembly.reflections[2].anchor.state.state_id == "R3_S2"  # its own view


def test_no_answer_is_other_and_an_all_wrong_group_gets_diagnosis_only_reflections(
    sandbox, store
) -> None:
    """All wrong, with a misread key among them: a READ without a sufficient state would make
    Algorithm 4 reject the whole group's output, so the misread is an ACQUIRE."""
    k = RED.metadata["key"]
    key = RED.metadata["key_box"]
    group = run(
        sandbox,
        store,
        RED,
        [
            script([key, cell(RED, k)], f"Key: {k}.", RED.metadata["digits"][k - 1]),
            script([key, cell(RED, 1)], "Key: 8 red.", wrong(RED)),
            script([key, RED.metadata["region"]], key_note(RED), None),
        ],
    )
    assembly, output = ask(RED, group, store)
    assert assembly.status == "diagnosis_only" and not assembly.problems
    assert list(sufficient(output)) == ["R3_S2"]
    assert stages(assembly) == [
        ("ACQUIRE", f"cropped cell {k}; the red key names cell {9 - k}"),
        ("ACQUIRE", f"noted key 8, but the red key is {k} and names cell {9 - k}"),
        ("OTHER", "no final answer given"),
    ]


def test_marked_the_framed_crop_is_the_evidence_and_the_decoy_is_named(sandbox, store) -> None:
    meta = MARKED.metadata
    decoy, t = meta["named"], meta["target"]
    assert decoy != t and meta["regions"] == [meta["region"]]
    group = run(
        sandbox,
        store,
        MARKED,
        [
            script([meta["region"]], "", MARKED.answer),
            script([meta["key_box"], cell(MARKED, decoy)], key_note(MARKED), wrong(MARKED)),
            script([meta["region"]], "", wrong(MARKED)),
        ],
    )
    assembly, output = ask(MARKED, group, store)
    assert sufficient(output) == {"R1_S1": ["R1_S1_IMG1"], "R3_S1": ["R3_S1_IMG1"]}
    assert stages(assembly) == [
        ("CORRECT", ""),
        ("ACQUIRE", f"cropped cell {decoy}; the framed cell is cell {t}; the key is a decoy"),
        ("READ", f"answered {wrong(MARKED)}; cell {t} shows {MARKED.answer}"),
    ]
    assert assembly.reflections[0].anchor.grounding.rule == KEYS_GROUNDING["marked"]


def test_crops_the_critic_was_not_shown_are_never_support(sandbox, store) -> None:
    """With one tool image shown, the correct rollout's key crop is shown and its cell crop is
    not: no state can be proved sufficient, and the output still passes Algorithm 4."""
    group = run(sandbox, store, GREY, [expert(GREY), script([], "", wrong(GREY))])
    assembly, output = ask(GREY, group, store, max_tool_images=1)
    assert output.sufficient_states == () and assembly.status == "no_reference"
    assert not assembly.problems


def test_keys_critic_over_http(sandbox, store) -> None:
    k = RED.metadata["key"]
    mapped = script([RED.metadata["key_box"], cell(RED, k)], f"Key: {k}.", wrong(RED))
    group = run(sandbox, store, RED, [expert(RED), mapped])
    correct = labels(group, RED)
    states = observed_states(group)
    request = build_critic_request(RED.question, RED.answer, group, correct, states, store.get)
    handle = run_app_in_thread(create_app(ScriptedCritic([GREY, RED, KEYED, MARKED])))
    send = HttpCritic(handle.base_url, "scripted-critic")

    async def go():
        try:
            return await ask_critic(request, send)
        finally:
            await send.aclose()

    try:
        reply = asyncio.run(go())
    finally:
        handle.stop()
    assembly = check_and_assemble(reply.output, states, correct, request.shown_image_ids)
    assert reply.attempts == 1 and assembly.status == "complete"
    assert stages(assembly)[1] == ("ACQUIRE", f"cropped cell {k}; the red key names cell {9 - k}")
    text = reflection_text(assembly.reflections[1])
    assert "Anchor evidence: 2 supporting image(s)" in text
    assert text.endswith(f"Discrepancy: cropped cell {k}; the red key names cell {9 - k}")


def keys_tokenizer(extra: list[str]):
    """The demo's tokenizer with the `synth_keys` episode phrases and `extra`."""
    from beacon.demo.model import demo_tokenizer

    tokenizer = demo_tokenizer()
    tokenizer.add_tokens([*KEYS_PHRASES, *extra])
    return tokenizer


def test_reflections_are_phrases_and_leave_episode_text_as_it_was(sandbox, store) -> None:
    """Every letter of a `synth_keys` reflection sits in a phrase token; the reflection phrases
    do not change how an episode's own text splits."""
    k = RED.metadata["key"]
    mapped = script([RED.metadata["key_box"], cell(RED, k)], f"Key: {k}.", wrong(RED))
    group = run(sandbox, store, RED, [expert(RED), mapped])
    assembly, _ = ask(RED, group, store)
    tokenizer = keys_tokenizer(KEYS_REFLECTION_PHRASES)
    for reflection in assembly.reflections:
        ids = tokenizer.encode(reflection_text(reflection), add_special_tokens=False)
        pieces = [tokenizer.decode([i]) for i in ids]
        assert not [p for p in pieces if len(p) == 1 and p.isalpha()], pieces
    plain = keys_tokenizer([])
    episodes = [seg.text for t in group for seg in t.segments if seg.role == "generated"]
    for text in [*episodes, GREY.question, MARKED.question, "\n\nHint: " + KEYED_HINT]:
        assert tokenizer.encode(text) == plain.encode(text), text
