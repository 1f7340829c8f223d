"""Demo II's premise values (`beacon.demo.premises`), counted by hand: on hand-built trajectories,
and on real eval runs of the scripted expert (served over HTTP, through the agent loop, the
sandbox and the verifier) given doctored items, so its episodes take a known mix of paths: the
designed one, a cell without the key, the key then a wrong cell."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from beacon.benchmarks import get_benchmark
from beacon.benchmarks.synth_demo import coords
from beacon.benchmarks.synth_keys import KEY_CELL, KEYED_HINTED, generate, grid_box
from beacon.data.eval_stages import run_trajectories
from beacon.demo.expert import crop_code
from beacon.demo.premises import (
    SampledRun,
    accuracy,
    crops,
    follows_procedure,
    grounding_cases,
    hgce_premises,
    key_box,
    key_first,
    key_reference,
    key_then_cell,
    probe_cases,
    sampled_run,
)
from beacon.eval.records import SAMPLES_FILE, TRAJECTORIES_FILE
from beacon.images import ImageStore
from beacon.jsonl import read_jsonl, write_jsonl_atomic
from beacon.train.core.encode import encode_trajectory
from beacon.train.opd.score import first_divergence, supervised_positions
from beacon.train.opd.step import Distilled
from beacon.types import ImageCrop, Sample, ToolCall, Trajectory

from .keys_expert_run import keys_expert_run

KEYED, TOLD = "synth_keys_keyed", "synth_keys_told"
SEED = 5
CENTRE, CORNER = grid_box(1, 1), grid_box(0, 0)


def rollout(*calls: list[tuple[int, ...] | None]) -> Trajectory:
    """A trajectory whose tool calls cut these boxes (None: a crop the sandbox could not
    place)."""
    tool_calls = [
        ToolCall(
            code="...",
            executed=True,
            ok=True,
            image_crops=[None if b is None else ImageCrop(frame=0, box=b) for b in boxes],
        )
        for boxes in calls
    ]
    return Trajectory(sample_id="0", mode="tool", format="thyme", tool_calls=tool_calls)


def test_the_key_boxes_are_the_layouts_key_cells() -> None:
    assert key_box("keyed") == key_box("marked") == CENTRE == grid_box(*KEY_CELL["C"])
    assert key_box("told") == CORNER


def test_crops_are_the_placed_boxes_in_order() -> None:
    a, b = grid_box(0, 1), grid_box(2, 2)
    t = rollout([a, None], [], [b, CENTRE])
    assert crops(t) == [a, b, CENTRE]
    assert crops(rollout()) == []


@pytest.mark.parametrize(
    ("calls", "keyed_first", "told_first", "procedure"),
    [
        ([[CENTRE], [grid_box(0, 0)]], True, False, False),  # layout C's key, then a cell
        ([[CORNER], [grid_box(2, 2)]], False, True, True),
        ([[CORNER, grid_box(1, 1)]], False, True, True),  # both crops in one call
        ([[CORNER], [CORNER]], False, True, False),  # the key twice
        ([[CORNER]], False, True, False),  # no cell after it
        ([[grid_box(2, 2)], [CORNER]], False, False, False),  # the cell first
        ([[None], [CORNER], [grid_box(0, 1)]], False, True, True),  # unplaced crops skipped
        ([], False, False, False),
    ],
)
def test_key_first_and_key_then_cell(
    calls: list, keyed_first: bool, told_first: bool, procedure: bool
) -> None:
    t = rollout(*calls)
    assert key_first(t, "keyed") is keyed_first
    assert key_first(t, "told") is told_first
    assert key_then_cell(t, "told") is procedure


# --- real eval runs of the scripted expert on doctored items -----------------------------------


def other_cell(sample: Sample) -> int:
    """A cell (1..8) other than the target."""
    return sample.metadata["target"] % 8 + 1


def cell_only(sample: Sample, cell: int) -> Sample:
    """The expert crops `cell` at once (no key) and answers its digit."""
    m = sample.metadata
    box = m["cell_boxes"][cell - 1]
    return replace(
        sample, answer=str(m["digits"][cell - 1]), metadata={**m, "kind": "marked", "region": box}
    )


def key_then(sample: Sample, cell: int) -> Sample:
    """The expert crops the key, notes it as it is, then crops `cell` and answers its digit."""
    m = sample.metadata
    box = m["cell_boxes"][cell - 1]
    return replace(sample, answer=str(m["digits"][cell - 1]), metadata={**m, "region": box})


KEYED_PLAN = ("designed", "right cell only", "right cell only", "wrong cell only", "key, wrong")
"""The unhinted keyed run's items 0..4: right 0, 1, 2; key first 0, 4."""
TOLD_PLAN = ("designed", "right cell only", "key, wrong", "right cell only")
"""The doctored told run's items 0..3: right 0, 1, 3; key then a cell 0, 2."""


def doctored(samples: list[Sample], plan: tuple[str, ...]) -> list[Sample]:
    """`samples` as the expert believes them: each takes the path `plan` names."""
    out = []
    for s, path in zip(samples, plan, strict=True):
        target, wrong = s.metadata["target"], other_cell(s)
        out.append(
            {
                "designed": s,
                "right cell only": cell_only(s, target),
                "wrong cell only": cell_only(s, wrong),
                "key, wrong": key_then(s, wrong),
            }[path]
        )
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Sampled runs (2 episodes per item) of the unhinted `keyed` items (doctored and plain) and
    of the hinted ones; greedy runs of `told` items, by the plain expert and by a doctored one."""
    root = tmp_path_factory.mktemp("premises")
    keyed = list(get_benchmark(KEYED).load(limit=len(KEYED_PLAN), seed=SEED))
    hinted = list(get_benchmark(KEYED_HINTED).load(limit=len(KEYED_PLAN), seed=SEED))
    told = list(get_benchmark(TOLD).load(limit=len(TOLD_PLAN), seed=SEED))
    n, m = len(KEYED_PLAN), len(TOLD_PLAN)
    return {
        "keyed": keys_expert_run(doctored(keyed, KEYED_PLAN), [KEYED], n, SEED, root / "k", 2),
        "hinted": keys_expert_run(hinted, [KEYED_HINTED], n, SEED, root / "h", 2),
        "clean": keys_expert_run(keyed, [KEYED], n, SEED, root / "c", 2),
        "told": keys_expert_run(told, [TOLD], m, SEED, root / "t"),
        "doctored": keys_expert_run(doctored(told, TOLD_PLAN), [TOLD], m, SEED, root / "d"),
    }


def test_sampled_runs_are_counted_per_rollout_and_per_item(runs: dict[str, Path]) -> None:
    assert sampled_run(runs["hinted"]) == SampledRun(10, 10, 5, 5, 10)
    unhinted = sampled_run(runs["keyed"])
    assert unhinted == SampledRun(rollouts=10, right=6, items=5, items_passed=3, key_first=4)
    assert (unhinted.success, unhinted.pass_at_k, unhinted.p_key_first) == (0.6, 0.6, 0.4)
    assert sampled_run(runs["told"], "told").p_key_first == 1.0
    assert sampled_run(runs["told"]).p_key_first == 0.0  # the centre is not the told key


def mixed_run(first: Path, second: Path, out: Path) -> Path:
    """A sampled run whose episode 0 of each item is `first`'s, episode 1 `second`'s: items
    whose two rollouts disagree, which the deterministic expert never gives in one run."""
    out.mkdir()
    for name in (SAMPLES_FILE, TRAJECTORIES_FILE):
        rows = [
            row
            for run, k in ((first, "/0"), (second, "/1"))
            for row in read_jsonl(run / name)
            if row["key"].endswith(k)
        ]
        write_jsonl_atomic(out / name, rows)
    return out


def test_pass_at_k_counts_an_item_with_one_right_rollout(runs, tmp_path: Path) -> None:
    mixed = sampled_run(mixed_run(runs["keyed"], runs["clean"], tmp_path / "mixed"))
    # episode 0: right on items 0, 1, 2, key first on 0, 4; episode 1: the designed path
    assert mixed == SampledRun(
        rollouts=10, right=8, items=5, items_passed=5, key_first=7, items_mixed=2, items_split=3
    )
    assert mixed.mixed == 0.4  # items 3 and 4: one right and one wrong rollout
    assert mixed.split == 0.6  # items 1, 2 and 3: one rollout crops the key first, one not
    assert (mixed.success, mixed.pass_at_k, mixed.p_key_first) == (0.8, 1.0, 0.7)


def test_hgce_premises_from_the_two_sampled_runs(runs: dict[str, Path]) -> None:
    p = hgce_premises(runs["keyed"], runs["hinted"])
    measured = (p.p_key_first, p.pass_at_8, p.unhinted_success, p.hinted_success)
    assert measured == (0.4, 0.6, 0.6, 1.0)
    assert (p.hinted_mixed, p.hinted_split) == (0.0, 0.0)  # every hinted rollout: key, right
    clean = hgce_premises(runs["hinted"], runs["hinted"])
    assert (clean.p_key_first, clean.pass_at_8, clean.unhinted_success) == (1.0, 1.0, 1.0)


def test_procedure_and_accuracy_of_told_runs(runs: dict[str, Path]) -> None:
    assert (follows_procedure(runs["told"]), accuracy(runs["told"])) == (1.0, 1.0)
    assert (follows_procedure(runs["doctored"]), accuracy(runs["doctored"])) == (0.5, 0.75)
    empty = runs["told"].parent / "empty"
    empty.mkdir()
    (empty / "samples.jsonl").write_text("")
    (empty / "trajectories.jsonl").write_text("")
    assert follows_procedure(empty) is None and accuracy(empty) is None


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-init demo checkpoint: the demo's tokenizer as the trainers load it."""
    from beacon.demo.model import make_demo_model

    return make_demo_model(tmp_path_factory.mktemp("demo-model"))


@pytest.fixture(scope="module")
def tokenizer(demo_model: Path):
    from beacon.engines.tokenizer import HFTokenizer

    return HFTokenizer.from_pretrained(demo_model)


@pytest.fixture(scope="module")
def store(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> ImageStore:
    """One store of the told runs' images (the groups below mix their rollouts)."""
    folder = tmp_path_factory.mktemp("told-images")
    for name in ("told", "doctored"):
        shutil.copytree(runs[name] / "images", folder, dirs_exist_ok=True)
    return ImageStore(folder)


def episodes(run: Path) -> dict[str, Trajectory]:
    return {e.trajectory.sample_id: e.trajectory for e in run_trajectories(run)}


def test_key_reference_moves_the_second_crop_to_the_target(runs, tokenizer, store) -> None:
    sample = generate(SEED, 2, "told")
    wrong = episodes(runs["doctored"])["2"]  # the key, then a wrong cell
    target = sample.metadata["region"]
    cropped = sample.metadata["cell_boxes"][other_cell(sample) - 1]
    assert crops(wrong) == [tuple(sample.metadata["key_box"]), tuple(cropped)]
    reference = key_reference(wrong, target)
    codes = [j for j, s in enumerate(wrong.segments) if s.kind == "code"]
    assert reference.segments[: codes[1]] == wrong.segments[: codes[1]]
    assert len(reference.segments) == codes[1] + 1 and reference.tool_calls == []
    moved = reference.segments[-1]
    assert (moved.role, moved.kind) == ("generated", "code")
    assert moved.text == f"\n```python\n{crop_code(target)}\n```\n"

    ours = encode_trajectory(wrong, tokenizer, store.header)
    ref = encode_trajectory(reference, tokenizer, store.header)
    position = first_divergence(ours, ref)
    first = int(supervised_positions(ours)[position])
    assert ours.input_ids[:first] == ref.input_ids[:first]
    a, b = coords(tuple(cropped)), coords(tuple(target))
    c = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
    decode = tokenizer.tokenizer.decode
    assert (decode([ours.input_ids[first]]), decode([ref.input_ids[first]])) == (a[c], b[c])
    assert decode(ours.input_ids[:first]).endswith(f"image.crop({a[:c]}")

    one_crop = episodes(runs["told"])["1"]
    assert key_reference(replace(one_crop, segments=one_crop.segments[:3]), target) is None


def group(sample: Sample, trajectories: list[Trajectory], correct: list[bool]) -> Distilled:
    """A Distilled of one item's rollouts (what `probe_cases` and `grounding_cases` read:
    `beacon.train.opd.step.collect` makes these from the student's rollouts)."""
    g = SimpleNamespace(sample=sample, trajectories=trajectories, correct=correct)
    return Distilled(g, 0, [])


def test_probe_cases_are_wrong_told_rollouts_with_a_second_crop(runs, tokenizer, store) -> None:
    plain, bad = episodes(runs["told"]), episodes(runs["doctored"])
    parts = SimpleNamespace(tokenizer=tokenizer, store=store)
    grey, red = generate(SEED, 2, "told"), generate(SEED, 1, "told")
    assert (grey.metadata["colour"], red.metadata["colour"]) == ("grey", "red")
    one_hop = replace(grey, metadata={k: v for k, v in grey.metadata.items() if k != "kind"})
    distilled = [
        group(grey, [plain["2"], bad["2"]], [True, False]),
        group(red, [bad["1"], plain["1"]], [False, False]),  # a cell only: no second crop
        group(one_hop, [bad["2"]], [False]),  # not a told item
    ]
    cases = probe_cases(parts, distilled)
    found = [(c.distilled, c.index, c.stratum) for c in cases]
    assert found == [(distilled[0], 1, "grey"), (distilled[1], 1, "red")]
    expected = key_reference(bad["2"], grey.metadata["region"])
    assert cases[0].reference == encode_trajectory(expected, tokenizer, store.header)
    assert cases[1].reference == encode_trajectory(
        key_reference(plain["1"], red.metadata["region"]), tokenizer, store.header
    )


def test_grounding_cases_keep_answers_equal_to_the_wrong_cell_they_cropped(runs, tokenizer) -> None:
    plain, bad = episodes(runs["told"]), episodes(runs["doctored"])
    parts = SimpleNamespace(tokenizer=tokenizer, store=ImageStore(runs["doctored"] / "images"))
    sample = generate(SEED, 2, "told")
    m = sample.metadata
    shown = str(m["digits"][other_cell(sample) - 1])
    assert bad["2"].final_answer == shown
    another = next(str(d) for d in range(10) if str(d) not in (shown, sample.answer))
    rollouts = [
        plain["2"],  # its last crop is the target
        bad["2"],  # the wrong cell, and its digit: kept
        replace(bad["2"], final_answer=another),  # the wrong cell, another digit
        replace(bad["2"], tool_calls=bad["2"].tool_calls[:1]),  # the key last
        rollout(),  # no crop
    ]
    d = group(sample, rollouts, [True, False, False, False, False])
    one_hop = replace(sample, metadata={k: v for k, v in m.items() if k != "kind"})
    cases = grounding_cases(parts, [d, group(one_hop, [bad["2"]], [False])])
    assert [(c.distilled, c.index) for c in cases] == [(d, 1)]
    assert tokenizer.tokenizer.decode([cases[0].evidence_token]) == shown
    assert cases[0].position is None


def test_on_an_engine_rollout_the_reference_leaves_it_at_the_crops_coordinate(
    demo_model: Path, turn_script: type, tmp_path: Path
) -> None:
    """The OPD trainer's rollouts carry the engine's token ids; the reference keeps them up to
    the moved crop, so the two first differ at that crop's first differing coordinate digit."""
    from beacon.agent.episode import EpisodeSpec
    from beacon.agent.loop import AgentLoop
    from beacon.demo.expert import key_note, keys_agent
    from beacon.engines.hf import HFEngine
    from beacon.sandbox import Sandbox, SandboxConfig

    sample = generate(SEED, 2, "told")
    m = sample.metadata
    wrong = m["cell_boxes"][other_cell(sample) - 1]
    turns = [
        f"<code>\n```python\n{crop_code(m['key_box'])}\n```\n</code>",
        f"{key_note(sample)}<code>\n```python\n{crop_code(wrong)}\n```\n</code>",
        f"<answer>{m['digits'][other_cell(sample) - 1]}</answer>",
    ]
    engine = HFEngine(demo_model, batch_size=1)
    tok = engine.tokenizer
    ids = [tok.encode(text) for text in turns]
    ids[-1] = [*ids[-1], *tok.eos_token_ids[-1:]]
    engine.logits_processors = [turn_script(ids, tok.encode("</sandbox_output>")[0])]
    store = ImageStore(tmp_path / "images")
    with (
        Sandbox(SandboxConfig(num_workers=1)) as sandbox,
        AgentLoop(engine, sandbox, keys_agent(), store=store) as loop,
    ):
        (trajectory,) = loop.run([EpisodeSpec(sample, mode="tool")])
    assert crops(trajectory) == [tuple(m["key_box"]), tuple(wrong)]
    assert all(s.token_ids for s in trajectory.segments)
    reference = key_reference(trajectory, m["region"])
    ours = encode_trajectory(trajectory, tok, store.header)
    ref = encode_trajectory(reference, tok, store.header)
    first = int(supervised_positions(ours)[first_divergence(ours, ref)])
    a, b = coords(tuple(wrong)), coords(tuple(m["region"]))
    c = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
    decode = tok.tokenizer.decode
    assert (decode([ours.input_ids[first]]), decode([ref.input_ids[first]])) == (a[c], b[c])
    prefix = f"{key_note(sample)}<code>\n```python\nimage.crop({a[:c]}"
    assert decode(ours.input_ids[:first]).endswith(prefix)


def test_teacher_probe_reports_red_on_the_reflected_and_grey_on_all(monkeypatch) -> None:
    """G-R1..G-R3 as the gates read them: red a0 on the rollouts with a reflection (the pairs
    aR is measured on), grey a0 on every grey rollout, the grounding gate's share."""
    from beacon.demo import premises
    from beacon.train.opd.decisive import DecisiveProbe, GroundingGate, StratumProbe

    red = StratumProbe(
        "red", n=5, base_right=3, reflected=4, reflected_right=3, base_right_reflected=1
    )
    grey = StratumProbe(
        "grey", n=8, base_right=6, reflected=2, reflected_right=2, base_right_reflected=2
    )
    gate = GroundingGate(n=4, kept=3)
    seen = {}

    def probe(parts, cases):
        seen["probe"] = cases
        return DecisiveProbe([grey, red])

    def grounding(parts, cases):
        seen["gate"] = cases
        return gate

    monkeypatch.setattr(premises, "decisive_probe", probe)
    monkeypatch.setattr(premises, "grounding_gate", grounding)
    monkeypatch.setattr(premises, "probe_cases", lambda parts, distilled: ["p", *distilled])
    monkeypatch.setattr(premises, "grounding_cases", lambda parts, distilled: ["g", *distilled])
    out = premises.teacher_probe(SimpleNamespace(), ["d"])
    assert (out.a0_red, out.ar_red, out.a0_plain, out.grounding) == (0.25, 0.75, 0.75, 0.75)
    assert seen == {"probe": ["p", "d"], "gate": ["g", "d"]}
    assert out.probe_line == DecisiveProbe([grey, red]).line() and out.grounding_line == gate.line()
    monkeypatch.setattr(premises, "decisive_probe", lambda parts, cases: DecisiveProbe())
    empty = premises.teacher_probe(SimpleNamespace(), [])
    assert (empty.a0_red, empty.ar_red, empty.a0_plain) == (None, None, None)


def test_revue_premises_from_the_probe_record_and_the_told_runs(runs, tmp_path: Path) -> None:
    from beacon.demo.premises import TeacherProbe, read_record, revue_premises, write_record

    path = tmp_path / "revue.json"
    assert read_record(path) == {}
    write_record(path, TeacherProbe(0.25, 0.75, 0.5, 1.0, "probe", "gate"))
    p = revue_premises(read_record(path), runs["doctored"], runs["told"])
    assert (p.a0_red, p.ar_red, p.grounding) == (0.25, 0.75, 1.0)
    assert (p.follows_procedure, p.student_told, p.teacher_told) == (0.5, 0.75, 1.0)
    assert p.teacher_plain == 1.0
    # G-R2 reads the teacher's plain keys only: items 0 and 2 (1 and 3 are red); item 2 wrong
    assert revue_premises({}, runs["told"], runs["doctored"]).teacher_plain == 0.5
    unmeasured = revue_premises({}, runs["told"], runs["told"])
    assert unmeasured.a0_red is None and unmeasured.follows_procedure == 1.0
