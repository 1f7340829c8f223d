"""Demo II's report section (`beacon.demo.report_keys`) on fake demo folders: eval runs in the
eval format (`samples.jsonl` records and `trajectories.jsonl` episodes whose crops are the
task's fixed boxes), training logs, premise records. The outcomes are built so each verdict of
the pre-registered rules is reached only when the evidence is wired to the right runs."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from beacon.benchmarks.synth_keys import LAYOUT, TOLD_QUESTION, grid_box, is_red, outer_cells
from beacon.demo.premises import key_box
from beacon.demo.report_keys import keys_sections
from beacon.rollout import sample_key
from beacon.types import ImageCrop, ToolCall, Trajectory

ARMS = ("accuracy", "naar", "hgce", "hgce_uninformative")
VARIANTS = ("vanilla", "revue", "shuffled", "control")
SEEDS = 3
KEYED, MARKED, TOLD = "synth_keys_keyed", "synth_keys_marked", "synth_keys_told"
KIND = {
    KEYED: "keyed",
    MARKED: "marked",
    TOLD: "told",
    "synth_demo": "keyed",
    "synth_keys_rl": "keyed",
}
HGCE_GATES = {
    "p_key_first": 0.05,
    "pass_at_8": 0.6,
    "hinted_success": 0.6,
    "unhinted_success": 0.1,
    "hinted_mixed": 0.8,
    "hinted_split": 0.7,
}
REVUE_GATES = {
    "a0_red": 0.2,
    "ar_red": 0.9,
    "a0_plain": 0.9,
    "grounding": 0.95,
    "probe_line": "probe: red a0 0.20 -> aR 0.90",
    "grounding_line": "grounding 0.95",
}
Rule = Callable[[int], bool]
"""An outcome of item i."""


def red(i: int) -> bool:
    return is_red(i, 0.5)


def episode(benchmark: str, i: int, correct: bool, first_key: bool) -> tuple[dict, dict]:
    """One tool-mode episode as `beacon eval` stores it: its record and its trajectory line."""
    kind = KIND[benchmark]
    cell = grid_box(*outer_cells(LAYOUT[kind])[i % 8])
    boxes = [key_box(kind), cell] if first_key else [cell]
    calls = [
        ToolCall(code="crop", executed=True, ok=True, image_crops=[ImageCrop(0, b)]) for b in boxes
    ]
    trajectory = Trajectory(str(i), "tool", "thyme", final_answer="1", tool_calls=calls)
    key = sample_key(benchmark, str(i), "tool", 0)
    record = {
        "key": key,
        "benchmark": benchmark,
        "sample_id": str(i),
        "mode": "tool",
        "k": 0,
        "category": kind,
        "difficulty": None,
        "correct": correct,
        "used_tool": True,
    }
    return record, {"key": key, "trajectory": json.loads(trajectory.to_json())}


def write_lines(path: Path, rows: Iterable[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_eval(root: Path, name: str, parts: Iterable[tuple[str, int, Rule, Rule]]) -> None:
    """A finished eval run: per (benchmark, items, right, key-first) the episodes of items
    0..items − 1."""
    pairs = [
        episode(bench, i, right(i), first(i))
        for bench, items, right, first in parts
        for i in range(items)
    ]
    folder = root / "eval" / name
    write_lines(folder / "samples.jsonl", [p[0] for p in pairs])
    write_lines(folder / "trajectories.jsonl", [p[1] for p in pairs])
    (folder / "summary.json").write_text("{}\n")


def always(_: int) -> bool:
    return True


def never(_: int) -> bool:
    return False


def share(tenths: int) -> Rule:
    """Right on `tenths` of every ten items."""
    return lambda i: i % 10 < tenths


# -- the folders -------------------------------------------------------------------------------
def hgce_folder(root: Path, uninformative: int = 2) -> None:
    """HGCE well above accuracy-only and (with `uninformative` tenths right) the uninformative
    hint on `keyed`, `marked` kept, its rescued items answered, its sampled key-first share up:
    "reproduced"."""
    keyed = {"hgce": 7, "accuracy": 2, "naar": 2, "hgce_uninformative": uninformative}
    first = {"hgce": 6, "accuracy": 1, "naar": 1, "hgce_uninformative": 1}
    for arm in ARMS:
        for s in range(SEEDS):
            right = share(keyed[arm] - (s == 1 and arm == "hgce"))
            write_eval(
                root,
                f"keys-{arm}-s{s}",
                [(KEYED, 180, right, never), (MARKED, 120, share(8), never)],
            )
            write_eval(root, f"keyed-sampled-{arm}-s{s}", [(KEYED, 180, right, share(first[arm]))])
            write_training(root / "rl" / f"{arm}-s{s}", hinted=arm.startswith("hgce"))
    write_eval(root, "keys-sft", [(KEYED, 180, share(1), never), (MARKED, 120, share(8), never)])
    for s in range(SEEDS):
        write_eval(root, f"rescued-hgce-s{s}-by-hgce", [("synth_keys_rl", 20, share(8), always)])
        write_eval(root, f"rescued-hgce-s{s}-by-accuracy", [("synth_keys_rl", 20, share(2), never)])
    (root / "gates").mkdir(exist_ok=True)
    (root / "gates" / "hgce.json").write_text(json.dumps(HGCE_GATES))


def write_training(run: Path, hinted: bool) -> None:
    """A GRPO run's logs: 40 steps of the sampled decision rate; hinted groups for HGCE arms."""
    steps = [
        {"step": t, "rl/decision_rate": t / 40, "rl/hint_log_ratio": -0.1 if hinted else None}
        for t in range(1, 41)
    ]
    write_lines(run / "metrics.jsonl", steps)
    if hinted:
        groups = [
            {"step": t, "sample_id": str(t), "correct": [t % 2 == 0, False]} for t in range(8)
        ]
        write_lines(run / "hgce.jsonl", groups)


def revue_folder(root: Path, gain_on: str = "red", shuffled_as: str = "vanilla") -> None:
    """`told` runs where ReVuE beats vanilla on the `gain_on` keys only, shuffled as the
    `shuffled_as` runs, the control = the student, premises passing."""
    where = red if gain_on == "red" else (lambda i: not red(i))

    def vanilla(i: int) -> bool:
        return not where(i)

    def revue(i: int) -> bool:
        return not where(i) or i % 10 != 1

    def teacher(i: int) -> bool:  # the constructed weakness: right on plain keys, not on red
        return not red(i)

    student = share(3)
    for name, right in (("student", student), ("teacher", teacher), ("opd-control-s0", student)):
        write_eval(root, f"told-{name}", [(TOLD, 180, right, always)])
    for s in range(SEEDS):
        shuffled = revue if shuffled_as == "revue" else vanilla
        for variant, right in (("revue", revue), ("vanilla", vanilla), ("shuffled", shuffled)):
            write_eval(root, f"told-opd-{variant}-s{s}", [(TOLD, 180, right, always)])
            write_eval(root, f"opd-{variant}-s{s}", [("synth_demo", 60, share(5), never)])
            write_opd(root / "opd" / f"{variant}-s{s}", critic=variant != "vanilla")
    (root / "gates").mkdir(exist_ok=True)
    (root / "gates" / "revue.json").write_text(json.dumps(REVUE_GATES))


def write_opd(run: Path, critic: bool) -> None:
    """An OPD run's step metrics and, with a critic, one accepted exchange per item kind."""
    coverage = {"coverage_complete": 6, "coverage_diagnosis_only": 1, "coverage_missing": 1}
    steps = [
        {"step": t, "revue/decisive_impact_share": 0.4, "revue/high_share_uniform": 0.3}
        | (coverage if critic else {})
        for t in range(1, 4)
    ]
    write_lines(run / "metrics.jsonl", steps)
    if not critic:
        return
    reply = {
        "applicable": True,
        "sufficient_states": [],
        "reading": {"query_slot": "q", "observed_value": "1", "visual_fact": "f"},
        "grounding": {"rule": "r"},
        "rollout_diagnoses": [
            {"rollout_id": "R1", "stage": "ACQUIRE", "discrepancy": "d"},
            {"rollout_id": "R2", "stage": "CORRECT", "discrepancy": ""},
        ],
    }
    exchanges = [
        {
            "step": 1,
            "request": {"messages": [{"role": "user", "content": [f"Question: {q}"]}]},
            "response": json.dumps(reply),
            "error": None,
        }
        for q in (TOLD_QUESTION, "What digit is inside the box?")
    ]
    write_lines(run / "critic.jsonl", exchanges)


def report(root: Path) -> list[str]:
    return keys_sections(root, SEEDS, ARMS, VARIANTS, n_resamples=200)


def verdict(lines: list[str], claim: str) -> str:
    found = [line for line in lines if line.startswith(f"**Verdict, {claim}**: ")]
    assert len(found) == 1, lines
    return found[0].removeprefix(f"**Verdict, {claim}**: ")


def points(lines: list[str], model: str) -> list[str]:
    """The point estimates of `model`'s row in an accuracy table (cells `0.50 [0.43, 0.58]`)."""
    row = next(line for line in lines if line.startswith(f"| {model} | ") and " [" in line)
    return [cell.split(" [")[0] for cell in row.strip("| ").split(" | ")[1:]]


HGCE_CLAIM, REVUE_CLAIM = "HGCE vs accuracy-only", "ReVuE vs vanilla OPD"


# -- tests -------------------------------------------------------------------------------------
def test_a_full_folder_gives_rules_premises_seed_tables_and_both_verdicts(tmp_path: Path) -> None:
    hgce_folder(tmp_path)
    revue_folder(tmp_path)
    lines = report(tmp_path)
    text = "\n".join(lines)
    assert verdict(lines, HGCE_CLAIM).startswith("reproduced:"), text
    assert verdict(lines, REVUE_CLAIM).startswith("reproduced:"), text
    rules = text.index("Pre-registered rules (demo2_design")
    premises = text.index("| G-H1 | unhinted `keyed`: sampled P(key-first) p0 | p0 = 0.05")
    assert rules < premises < text.index("- Primary, unhinted `keyed`: HGCE − accuracy-only +")
    assert "| seed | HGCE | accuracy-only |" in text
    assert "| seed | ReVuE | vanilla OPD |" in text
    assert "| seed | ReVuE | shuffled reflection |" in text
    assert "- probe: red a0 0.20 -> aR 0.90" in text
    assert "**constructed**" in text
    assert "not run" not in text.split("### 4.3")[1].split("Mechanism")[0]
    assert "| HGCE | 1 | 8 | 0.25 | 4 | -0.100 |" in text  # hinted groups, success, rescues
    assert "| accuracy-only | 0 | 0.14 | 0.39 | 0.64 | 0.89 |" in text  # decision-rate windows
    assert "| steps 21-30 | steps 31-40 |" in text  # the last window ends at the last step
    assert "| ReVuE | told | 3 | 3 | 0 | 0 | 0 |" in text  # 3 seeds, one exchange each
    assert "| ReVuE | 0.40 | 0.30 | 54/72 | 9/72 | 9/72 |" in text
    assert points(lines, "vanilla OPD") == ["0.50", "0.00", "1.00"]  # `told`, red, plain
    assert points(lines, "cold start") == ["0.10", "0.80"]  # `keyed`, `marked`


def test_without_the_hgce_premise_record_hgce_is_not_tested(tmp_path: Path) -> None:
    hgce_folder(tmp_path)
    revue_folder(tmp_path)
    (tmp_path / "gates" / "hgce.json").unlink()
    lines = report(tmp_path)
    assert verdict(lines, HGCE_CLAIM).startswith(
        "not tested: premise failed (G-H1 p0 = not measured"
    )
    assert "`gates/hgce.json`: not measured (its stage did not run), so its gates fail." in lines
    assert verdict(lines, REVUE_CLAIM).startswith("reproduced:")


@pytest.mark.parametrize(
    ("gain_on", "outcome"),
    [("red", "reproduced:"), ("plain", "reproduced, but not the paper's mechanism:")],
)
def test_revue_reproduced_only_when_the_gain_sits_on_red_keys(
    tmp_path: Path, gain_on: str, outcome: str
) -> None:
    revue_folder(tmp_path, gain_on)
    lines = report(tmp_path)
    assert verdict(lines, REVUE_CLAIM).startswith(outcome), "\n".join(lines)
    assert verdict(lines, HGCE_CLAIM).startswith("not tested")


def test_content_controls_that_do_as_well_are_not_the_papers_mechanism(tmp_path: Path) -> None:
    hgce_folder(tmp_path, uninformative=7)
    revue_folder(tmp_path, shuffled_as="revue")
    lines = report(tmp_path)
    other = "reproduced, but not the paper's mechanism:"
    assert verdict(lines, HGCE_CLAIM).startswith(other), "\n".join(lines)
    assert verdict(lines, REVUE_CLAIM).startswith(other), "\n".join(lines)


def test_a_moved_control_keeps_revue_from_reproduced(tmp_path: Path) -> None:
    revue_folder(tmp_path)
    write_eval(tmp_path, "told-opd-control-s0", [(TOLD, 180, share(4), always)])
    assert verdict(report(tmp_path), REVUE_CLAIM).startswith("inconclusive:")


def test_an_empty_folder_renders_not_run_and_not_tested(tmp_path: Path) -> None:
    lines = report(tmp_path)
    text = "\n".join(lines)
    assert verdict(lines, HGCE_CLAIM).startswith("not tested: premise failed")
    assert verdict(lines, REVUE_CLAIM).startswith("not tested: premise failed")
    assert "- Primary, `told`: not run (`eval/told-opd-revue-s0`" in text
    assert "- Control: teacher = student − student on `told`: not run" in text


def test_a_missing_seed_is_named_and_the_rest_compared(tmp_path: Path) -> None:
    hgce_folder(tmp_path)
    (tmp_path / "eval" / "keys-hgce-s2" / "summary.json").unlink()
    text = "\n".join(report(tmp_path))
    primary = next(line for line in text.splitlines() if line.startswith("- Primary, unhinted"))
    assert "HGCE − accuracy-only +" in primary
    assert "Not run: `eval/keys-hgce-s2`." in primary
