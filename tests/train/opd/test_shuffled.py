"""The shuffled-reflection control (`beacon.train.opd.shuffled`) on real `synth_keys` groups:
real episodes (agent loop, sandbox, image store), the scripted critic and Algorithm 4, then each
rollout's borrowed reflection: another item's, whole (text and its crops), of the same kind,
drawn from the seed and step alone."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from beacon.benchmarks.synth_keys import generate
from beacon.images import ImageStore
from beacon.sandbox import Sandbox
from beacon.train.opd.assemble import Assembly
from beacon.train.opd.score import reflection_text
from beacon.train.opd.shuffled import (
    POOL_FILE,
    GroupReflections,
    read_pool,
    shuffled_assignment,
    step_donors,
    write_pool,
)
from beacon.train.opd.step import Distilled, borrow_reflections, reflection_context
from beacon.types import Sample, Trajectory

from .test_scripted_keys import ask, cell, expert, run, script, wrong

ITEMS = [generate(0, j, "told") for j in range(3)]


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox() as sb:
        yield sb


@pytest.fixture(scope="module")
def groups(
    sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory
) -> list[tuple[Sample, list[Trajectory], Assembly]]:
    """Per item: the expert, a rollout that cropped a wrong cell, one that answered without a
    crop; complete reflections (a CORRECT, two ACQUIRE). Two more groups are all wrong
    (diagnosis-only reflections)."""
    store = ImageStore(tmp_path_factory.mktemp("shuffled") / "images")
    out = []
    for sample in ITEMS:
        k = sample.metadata["key"]
        off = cell(sample, 1 if sample.metadata["target"] != 1 else 2)
        scripts = [
            expert(sample),
            script([sample.metadata["key_box"], off], f"Key: {k}.", wrong(sample)),
            script([], "", wrong(sample)),
        ]
        trajectories = run(sandbox, store, sample, scripts)
        assembly, _ = ask(sample, trajectories, store)
        assert assembly.status == "complete"
        out.append((sample, trajectories, assembly))
    for j in (3, 4):
        lost = generate(0, j, "told")
        trajectories = run(sandbox, store, lost, [script([], "", wrong(lost))] * 2)
        assembly, _ = ask(lost, trajectories, store)
        assert assembly.status == "diagnosis_only"
        out.append((lost, trajectories, assembly))
    return out


def reflections(groups, slots=None) -> list[GroupReflections]:
    chosen = range(len(groups)) if slots is None else slots
    return [GroupReflections.of(s, groups[s][0], groups[s][2].reflections) for s in chosen]


def crops(trajectories: list[Trajectory]) -> set[str]:
    return {key for t in trajectories for call in t.tool_calls for key in call.images}


def test_every_reflection_is_another_items_whole_reflection_of_the_same_kind(groups) -> None:
    assignment = shuffled_assignment(reflections(groups), [], seed=7, step=3)
    by_item = {s.id: (t, a) for s, t, a in groups}
    borrowed = 0
    for slot, (sample, _, assembly) in enumerate(groups):
        for own, donor in zip(assembly.reflections, assignment.donors[slot], strict=True):
            assert donor is not None and donor.item != sample.id
            assert donor.complete == own.complete and donor.stage == own.break_point.stage
            donor_trajectories, donor_assembly = by_item[donor.item]
            original = donor_assembly.reflections[donor.slot]
            assert donor.text == reflection_text(original)  # the whole reflection, unchanged
            keys = original.anchor.support_image_keys if own.complete else ()
            assert set(donor.keys) == set(keys)
            assert set(donor.keys) <= crops(donor_trajectories)  # the other item's crops
            assert not set(donor.keys) & crops(groups[slot][1])
            borrowed += 1
    assert borrowed == 13 and assignment.none == 0 and assignment.previous == 0


def test_the_draw_depends_on_the_seed_and_step_only(groups) -> None:
    def drawn(seed: int, step: int, order: list[int]) -> dict:
        assignment = shuffled_assignment(reflections(groups, order), [], seed, step)
        return {k: [(d.item, d.slot) for d in v] for k, v in assignment.donors.items()}

    first = drawn(7, 3, [0, 1, 2, 3, 4])
    assert drawn(7, 3, [3, 1, 4, 0, 2]) == first  # the groups' order (process shares) is irrelevant
    others = [drawn(seed, step, [0, 1, 2, 3, 4]) for seed, step in ((8, 3), (7, 4), (9, 5))]
    assert any(o != first for o in others)


def test_a_lone_group_draws_from_the_last_kept_pool_or_gets_none(groups, tmp_path) -> None:
    lone = reflections(groups, [0])
    nothing = shuffled_assignment(lone, [], seed=7, step=1)
    assert nothing.donors[0] == [None, None, None] and nothing.none == 3
    write_pool(tmp_path, 1, step_donors(reflections(groups, [1]), 1))
    write_pool(tmp_path, 2, step_donors(reflections(groups, [0]), 2))  # only its own item
    assert {d.item for d in read_pool(tmp_path, 3)} == {ITEMS[0].id}
    same_item = shuffled_assignment(lone, read_pool(tmp_path, 3), seed=7, step=3)
    assert same_item.none == 3  # never the rollout's own item, even from an earlier step
    previous = read_pool(tmp_path, 2)  # step 2 redone after a resume: step 1's pool
    assert {d.item for d in previous} == {ITEMS[1].id}
    served = shuffled_assignment(lone, previous, seed=7, step=2)
    assert served.none == 0 and served.previous == 3
    assert all(d.item == ITEMS[1].id and d.step == 1 for d in served.donors[0])


def test_rollouts_without_a_reflection_stay_without(groups) -> None:
    sample, _, assembly = groups[0]
    partial = GroupReflections.of(0, sample, [None, *assembly.reflections[1:]])
    assignment = shuffled_assignment([partial, *reflections(groups, [1])], [], 7, 1)
    assert assignment.donors[0][0] is None and all(assignment.donors[0][1:])


def test_the_teacher_context_carries_the_borrowed_text_and_images(groups, tmp_path) -> None:
    """Through the trainer: `borrow_reflections` on the step's groups, then the teacher's
    context of each rollout; a fresh call (a resumed process) with the kept pool draws the same."""

    def distilled() -> list[Distilled]:
        out = []
        for slot, (_, trajectories, assembly) in enumerate(groups):
            group = SimpleNamespace(sample=groups[slot][0], trajectories=trajectories)
            out.append(Distilled(group, slot, [None] * len(trajectories), assembly))
        return out

    accelerator = SimpleNamespace(num_processes=1, is_main_process=True)
    parts = SimpleNamespace(
        policy=SimpleNamespace(accelerator=accelerator),
        run_dir=tmp_path,
        cfg=SimpleNamespace(train=SimpleNamespace(seed=5)),
    )
    first = distilled()
    assignment = borrow_reflections(parts, first, 4)
    assert assignment.none == 0 and (tmp_path / POOL_FILE).exists()
    for d in first:
        for i, donor in enumerate(d.borrowed):
            assert reflection_context(parts, d, i) == (donor.text, donor.keys)
            own = reflection_text(d.assembly.reflections[i])
            assert reflection_context(parts, d, i)[0] != own
    again = distilled()
    borrow_reflections(parts, again, 4)  # the same step redone: same draw
    assert [d.borrowed for d in again] == [d.borrowed for d in first]


def test_donors_come_from_items_of_the_same_family_and_each_family_keeps_its_last_step(
    groups, tmp_path
) -> None:
    """A pool that mixes tasks swaps a task's reflections among its own items: a told rollout
    never reads a reflection written for another benchmark or kind, from this step or kept."""
    told = reflections(groups, [0])
    (other,) = reflections(groups, [1])
    one_hop = GroupReflections(1, other.item, other.reflections, family="synth_demo/")
    assignment = shuffled_assignment([*told, one_hop], [], seed=7, step=2)
    assert assignment.none == 6  # each side has only the other family's donors
    write_pool(tmp_path, 1, step_donors(reflections(groups, [2]), 1))  # told, step 1
    write_pool(tmp_path, 2, step_donors([one_hop], 2))  # one-hop only, step 2
    write_pool(tmp_path, 3, step_donors([one_hop], 3))  # step 2's one-hop pool is superseded
    kept = read_pool(tmp_path, 4)
    assert {(d.family, d.step) for d in kept} == {(told[0].family, 1), ("synth_demo/", 3)}
    served = shuffled_assignment(told, kept, seed=7, step=4)
    assert served.none == 0 and {d.item for d in served.donors[0]} == {ITEMS[2].id}
