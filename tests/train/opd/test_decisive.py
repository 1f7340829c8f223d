"""The decisive-token probe, the grounding gate and the mechanism numbers of a step, on cases
where the answer is known by construction: the tiny model's rollouts are forced through
`beacon.fakes.logits.ScriptedTokens` (a wrong and a right answer of the same item), and the
teacher's logits are set by the test: it reads whether its prompt holds a reflection, as the
trainer's conditioning (`step.conditioned_scores`) builds it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from beacon.agent.config import AgentConfig
from beacon.agent.episode import EpisodeSpec
from beacon.agent.loop import AgentLoop
from beacon.benchmarks.synth import generate
from beacon.engines.hf import HFEngine
from beacon.fakes.logits import ScriptedTokens
from beacon.images import ImageStore
from beacon.train.core.encode import EncodedTrajectory, encode_trajectory
from beacon.train.opd.assemble import Assembly, BreakPoint, Reflection
from beacon.train.opd.decisive import (
    GroundingCase,
    ProbeCase,
    decisive_probe,
    grounding_gate,
    sibling_cases,
)
from beacon.train.opd.revue_loss import TeacherScores, reduce_logits
from beacon.train.opd.score import REFLECTION_HEADER, first_divergence, supervised_positions
from beacon.train.opd.step import Distilled, decisive_impact, mechanism_metrics, uniform_high_share

RED, PLAIN, BARE = (generate(0, j) for j in range(3))


def digit(sample: Any, shift: int) -> str:
    return str((int(sample.answer) + shift) % 10) if sample.answer.isdigit() else str(shift)


@pytest.fixture(scope="module")
def rollouts(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """Per item, a wrong rollout (answer + 1) and a right one (the answer), forced token by
    token on the tiny model; the same prompt, so they first differ at the answer digit."""
    store = ImageStore(tmp_path_factory.mktemp("decisive") / "images")
    engine = HFEngine(tiny_model_path)
    tok = engine.tokenizer
    agent = AgentConfig(temperature=1.0, max_new_tokens_per_turn=24, max_turns=1)
    out = {}
    for sample in (RED, PLAIN, BARE):
        pair = []
        for answer in (digit(sample, 1), sample.answer):
            text = f"The answer is <answer>{answer}</answer>"
            script = [*tok.encode(text), tok.eos_token_ids[-1]]
            engine.logits_processors = [ScriptedTokens(script)]
            with AgentLoop(engine, None, agent, store=store) as loop:
                (trajectory,) = loop.run([EpisodeSpec(sample, "notool", seed=1)])
            pair.append(trajectory)
        out[sample.id] = pair
    return out, store, tok


class KnownTeacher:
    """A teacher whose argmax is set by construction. At a position where the student wrote a
    digit, it picks `without[item]` (a digit) with no reflection in its prompt, `with_[item]`
    with one; at every other position the student's own token."""

    def __init__(self, tokenizer: Any, without: dict[str, str], with_: dict[str, str]) -> None:
        self.tokenizer = tokenizer
        self.without, self.with_ = without, with_
        self.calls = 0

    def teacher_scores(self, encoded: EncodedTrajectory, k: int, chunk_size: int) -> TeacherScores:
        self.calls += 1
        positions = supervised_positions(encoded)
        ids = torch.tensor(encoded.input_ids)[positions]
        reflected = REFLECTION_HEADER in self.tokenizer.decode(encoded.input_ids)
        choice = (self.with_ if reflected else self.without)[encoded.sample_id]
        chosen = self.tokenizer.encode(choice)[0]
        logits = torch.zeros(len(ids), max(*encoded.input_ids, chosen) + 1)
        for row, token in enumerate(ids.tolist()):
            wrote_digit = self.tokenizer.decode([token]).strip().isdigit()
            logits[row, chosen if wrote_digit else token] = 10.0
        return reduce_logits(logits, ids, k)


def distilled(rollouts, sample, reflect: bool, slot: int = 0) -> Distilled:
    pairs, _store, tok = rollouts
    trajectories = pairs[sample.id]
    group = SimpleNamespace(sample=sample, trajectories=trajectories, correct=[False, True])
    encoded = [encode_trajectory(t, tok) for t in trajectories]
    note = Reflection(None, BreakPoint("READ", f"the digit is {sample.answer}"))
    assembly = Assembly([note if reflect else None, None], "diagnosis_only")
    d = Distilled(group, slot, encoded, assembly)
    d.aligned = [True, True]
    return d


def parts(rollouts, teacher: KnownTeacher) -> SimpleNamespace:
    _pairs, store, tok = rollouts
    cfg = SimpleNamespace(
        teacher=SimpleNamespace(context="reflection", reencode_check=False, position="end"),
        revue=SimpleNamespace(k_support=4, chunk_size=8),
    )
    return SimpleNamespace(cfg=cfg, tokenizer=tok, store=store, teacher=teacher)


def test_a0_and_ar_per_stratum_at_the_first_divergent_token(rollouts) -> None:
    teacher = KnownTeacher(
        rollouts[2],
        without={RED.id: digit(RED, 1), PLAIN.id: PLAIN.answer, BARE.id: BARE.answer},
        with_={RED.id: RED.answer, PLAIN.id: PLAIN.answer, BARE.id: digit(BARE, 1)},
    )
    groups = [
        distilled(rollouts, RED, True, 0),
        distilled(rollouts, PLAIN, True, 1),
        distilled(rollouts, BARE, False, 2),  # no reflection: in a0 only
    ]
    strata = {RED.id: "red", PLAIN.id: "plain", BARE.id: "plain"}
    cases = sibling_cases(groups, lambda s: strata[s.id])
    assert [(c.distilled.slot, c.index) for c in cases] == [(0, 0), (1, 0), (2, 0)]
    right = groups[0]
    cases.append(ProbeCase(right, 1, right.encoded[1], "red"))  # the reference itself
    probe = decisive_probe(parts(rollouts, teacher), cases)
    red, plain = probe.stratum("red"), probe.stratum("plain")
    assert (red.n, red.a0, red.reflected, red.a_r) == (1, 0.0, 1, 1.0)
    assert (plain.n, plain.a0, plain.reflected, plain.a_r, plain.a0_reflected) == (
        2,
        1.0,
        1,
        1.0,
        1.0,
    )
    assert probe.no_divergence == 1
    assert "red: a0 0/1 = 0.00; on the 1 with a reflection a0 0/1 = 0.00 -> aR 1/1 = 1.00" in (
        probe.line()
    )


def test_the_grounding_gate_sees_a_reflection_that_pushes_the_reference_answer(rollouts) -> None:
    wrong = digit(RED, 1)  # what the wrong rollout's own evidence shows, by construction here
    token = rollouts[2].encode(wrong)[0]
    d = distilled(rollouts, RED, True)
    bare = distilled(rollouts, BARE, False)
    cases = [
        GroundingCase(d, 0, token),
        GroundingCase(bare, 0, rollouts[2].encode(digit(BARE, 1))[0]),  # no reflection
        GroundingCase(d, 0, rollouts[2].encode(digit(RED, 5))[0]),  # never written
    ]
    pushes = KnownTeacher(rollouts[2], without={RED.id: wrong}, with_={RED.id: RED.answer})
    gate = grounding_gate(parts(rollouts, pushes), cases)
    assert (gate.n, gate.kept, gate.no_reflection, gate.unlocated) == (1, 0, 1, 1)
    assert not gate.passes(0.9) and "0/1 = 0.00" in gate.line()
    grounded = KnownTeacher(rollouts[2], without={RED.id: wrong}, with_={RED.id: wrong})
    assert grounding_gate(parts(rollouts, grounded), cases).passes(0.9)
    answer = first_divergence(d.encoded[0], d.encoded[1])
    explicit = grounding_gate(parts(rollouts, grounded), [GroundingCase(d, 0, token, answer)])
    assert explicit.share == 1.0


def test_first_divergence_is_a_generated_token() -> None:
    def enc(ids: list[int], mask: list[int]) -> EncodedTrajectory:
        return EncodedTrajectory(sample_id="s", input_ids=ids, loss_mask=mask, images=[])

    student = enc([1, 2, 5, 6, 7, 8], [0, 0, 1, 1, 0, 1])
    assert first_divergence(student, enc([1, 2, 5, 9], [0, 0, 1, 1])) == 1
    assert first_divergence(student, enc([1, 2, 5, 6, 3, 8], [0, 0, 1, 1, 0, 1])) is None
    assert first_divergence(student, enc([1, 3, 5], [0, 0, 1])) is None  # another prompt
    assert first_divergence(student, enc([1, 2, 5], [0, 0, 1])) is None  # a prefix


def test_high_share_of_the_uniform_loss_by_hand() -> None:
    kl = torch.tensor([1.0, 2.0, 3.0, 4.0])
    impact = torch.tensor([0.1, 0.9, 0.0, 0.5])
    # alpha 0.5: High = the 2 largest impacts, positions 1 and 3: (2 + 4) / 4 of 10 / 4
    assert uniform_high_share(kl, impact, 0.5) == (1.5, 2.5)
    # alpha 0.2: ceil(0.8) = 1 position, position 1
    assert uniform_high_share(kl, impact, 0.2) == (0.5, 2.5)
    assert uniform_high_share(kl, None, 0.2) is None
    assert uniform_high_share(kl, torch.zeros(4), 0.2) is None
    other = uniform_high_share(torch.tensor([3.0, 1.0]), torch.tensor([1.0, 0.0]), 0.5)
    records = [
        {"uniform_high": (1.5, 2.5), "decisive_impact": 0.5},
        {"uniform_high": other, "decisive_impact": None},
        {"uniform_high": None, "decisive_impact": 0.25},
    ]
    metrics = mechanism_metrics(records)
    assert metrics["revue/high_share_uniform"] == pytest.approx((1.5 + 1.5) / (2.5 + 2.0))
    assert metrics["revue/decisive_impact_share"] == pytest.approx(0.375)
    assert metrics["revue/decisive_rollouts"] == 2
    assert mechanism_metrics([])["revue/high_share_uniform"] is None


def test_decisive_impact_share_of_a_wrong_rollout(rollouts) -> None:
    d = distilled(rollouts, RED, True)
    n = d.encoded[0].num_loss_tokens
    position = first_divergence(d.encoded[0], d.encoded[1])
    impact = torch.ones(n)
    impact[position] = n - 1.0  # half of the total: n - 1 ones and n - 1
    assert decisive_impact(d, 0, impact) == pytest.approx(0.5)
    assert decisive_impact(d, 1, impact) is None  # the correct one has no decisive token
    assert decisive_impact(d, 0, None) is None
