"""Pilot: which ReVuE student lets the teacher's reflection act (gate G-R1)?

Reads a finished `beacon demo` folder and, per student recipe, trains a student from the demo's
own student init (`student-init/`) on the demo's SFT set, then measures what decides G-R1:

- whether the student sees a key's colour: its held-out `told` evaluation, read by
  `demo2_colour_note.colour_note` (share of red / grey keys noted " red.");
- its `told` accuracy, on grey and red keys;
- the demo's decisive-token probe (`beacon.demo.premises.measure_teacher_probe`) with the demo's
  teacher on this student's rollouts: a0 and aR on red keys;
- the scripted critic's diagnosis of the probe's wrong red-key rollouts: the designed error (key
  read right, then the cell a grey key would name: `cropped cell ...`), a misread key digit
  (`noted key ...`), or another (no key crop, the right cell misread).

Recipes (`--recipes`, comma-separated `STEPS` or `STEPSxR`): `STEPS` SFT steps on the SFT set,
its `told` rows R times over (`500x3`: 500 steps, each `told` row three times). The demo's own
student is `500` (read from the folder, not rerun). Every run is an ordinary SFT run folder under
`DEMO/pilot-student/` (a finished one is read, not rerun).

    python benchmarks/demo2_student_pilot.py runs/demo --recipes 1000,500x3
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from collections import Counter
from pathlib import Path

from beacon.benchmarks.synth_demo import render_once
from beacon.data.records import SFT_FILE
from beacon.demo.pipeline import DemoStages, final_checkpoint
from beacon.demo.premises import REVUE_FILE, accuracy, measure_teacher_probe, plain_key, red_key
from beacon.jsonl import read_jsonl, write_jsonl_atomic
from beacon.runfolder import CRITIC_LOG
from demo2_colour_note import colour_note
from demo2_teacher_pilot import demo_config

SFT_SET = "sft"


def sft_folders(root: Path, repeat: int) -> list[str]:
    """The SFT data folders of a student whose `told` rows appear `repeat` times."""
    if repeat == 1:
        return [SFT_SET]
    folder = f"pilot-student/told-x{repeat}"
    if not (root / folder / SFT_FILE).exists():
        rows = read_jsonl(root / SFT_SET / SFT_FILE)
        told = [row for row in rows if "told_red_as_grey" in row.get("metadata", {})]
        write_jsonl_atomic(root / folder / SFT_FILE, told * (repeat - 1))
    return [SFT_SET, folder]


def red_errors(probe_dir: Path) -> Counter[str]:
    """The scripted critic's diagnoses of the probe's wrong red-key rollouts."""
    kinds: Counter[str] = Counter()
    for row in read_jsonl(probe_dir / CRITIC_LOG):
        response = row.get("response")
        answer = json.loads(response) if isinstance(response, str) else response
        fact = answer.get("reading", {}).get("visual_fact", "") if isinstance(answer, dict) else ""
        if '"colour": "red"' not in fact:  # the critic's facts: `the image shows {...}`
            continue
        for diagnosis in answer.get("rollout_diagnoses", []):
            if diagnosis.get("stage") != "CORRECT":
                kinds[error_kind(diagnosis.get("discrepancy", ""))] += 1
    return kinds


def error_kind(discrepancy: str) -> str:
    """The scripted critic's discrepancy on a `told` rollout (`scripted_critic.key_discrepancy`)
    -> designed (the key cropped and read right, then a cell it does not name: where a red key
    mapped as a grey one lands), misread key, or other (no key crop, the right cell misread)."""
    if discrepancy.startswith("noted key"):
        return "misread key"
    if discrepancy.startswith("cropped cell") and "without the key" not in discrepancy:
        return "designed"
    return "other"


def pilot(stages: DemoStages, steps: int, repeat: int) -> dict:
    """Train (or read) one pilot student and measure it (record kept in its folder)."""
    root = stages.root
    out = root / "pilot-student" / f"{steps}x{repeat}"
    record = out / "pilot.json"
    if record.exists():
        return json.loads(record.read_text())
    run_dir, name = out / "sft", f"pilot-student-{steps}x{repeat}"
    with render_once():
        stages.sft(run_dir, root / "student-init", steps, sft_folders(root, repeat))
        student = final_checkpoint(run_dir, steps)
        stages.told(name, student)
        shutil.rmtree(out / "probe", ignore_errors=True)  # its critic log is read: one probe's
        cfg = stages.opd_config("revue", 0, out / "probe")
        cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"path": str(student)})})
        probe = measure_teacher_probe(cfg, stages.cfg.revue.probe_items)
    values = {"a0_red": probe.a0_red, "ar_red": probe.ar_red, "probe_line": probe.probe_line}
    result = measured(stages.eval_dir(f"told-{name}"), out / "probe", values)
    out.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(result, indent=2) + "\n")
    return result


def demo_student(stages: DemoStages) -> dict:
    """The demo's own student, read from its folder."""
    gates = json.loads((stages.gates_dir() / REVUE_FILE).read_text())
    values = {key: gates.get(key) for key in ("a0_red", "ar_red", "probe_line")}
    return measured(stages.eval_dir("told-student"), stages.gates_dir() / "revue-probe", values)


def measured(told_run: Path, probe_dir: Path, probe: dict) -> dict:
    """One student's row: colour notes and accuracy by key colour on its held-out `told` run,
    the probe's values (`probe`) and the critic's diagnoses in `probe_dir`."""
    notes = colour_note(told_run)
    return {
        "red_noted": {colour: v[1] for colour, v in notes.items()},
        "told": {"grey": accuracy(told_run, plain_key), "red": accuracy(told_run, red_key)},
        **probe,
        "red_errors": dict(red_errors(probe_dir)),
    }


def share(value: float | None) -> str:
    """A table cell: two decimals, or "-" where nothing was measured (no note, no probe case)."""
    return "-" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("demo", type=Path, help="a finished beacon demo folder")
    parser.add_argument("--recipes", default="1000,500x3", help="STEPS or STEPSxREPEAT, ...")
    args = parser.parse_args()
    root = args.demo.resolve()
    needed = [root / "gates" / REVUE_FILE, root / "eval" / "told-student", root / "student-init"]
    missing = [str(path) for path in needed if not path.exists()]
    if missing:
        parser.error(f"not a finished demo folder, {', '.join(missing)} missing: run beacon demo")
    recipes = [r for r in args.recipes.split(",") if r]
    if not all(re.fullmatch(r"[1-9]\d*(x[1-9]\d*)?", r) for r in recipes):
        parser.error(f"--recipes {args.recipes!r}: give STEPS or STEPSxREPEAT, e.g. 1000,500x3")
    cfg = demo_config(root).model_copy(update={"out": str(root), "progress": False})
    stages = DemoStages(cfg)
    rows = [(f"the demo's ({cfg.revue.student_sft_steps} steps)", demo_student(stages))]
    for recipe in recipes:
        steps, _, repeat = recipe.partition("x")
        times = int(repeat or 1)
        rows.append((f"{steps} steps, told x{times}", pilot(stages, int(steps), times)))
    header = "| student | notes red on red / grey keys | told grey / red | a0 -> aR red |"
    print(header + " wrong red rollouts: designed / key misread / other |")
    print("|---|---|---|---|---|")
    for name, r in rows:
        noted, told, errors = r["red_noted"], r["told"], r["red_errors"]
        cells = [
            f"{share(noted.get('red'))} / {share(noted.get('grey'))}",
            f"{share(told.get('grey'))} / {share(told.get('red'))}",
            f"{share(r['a0_red'])} -> {share(r['ar_red'])}",
            " / ".join(str(errors.get(kind, 0)) for kind in ("designed", "misread key", "other")),
        ]
        print(f"| {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
