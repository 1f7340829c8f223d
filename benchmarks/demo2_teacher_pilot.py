"""Pilot: which teacher SFT makes the ReVuE teacher read a `told` reflection (gate G-R1)?

Reads a finished `beacon demo` folder (its teacher source, `teacher-data/`, `teacher-told/`, the
student) and, per recipe, fine-tunes the teacher source again and measures the decisive-token
probe the demo's "ReVuE premises" stage measures (`beacon.demo.premises.measure_teacher_probe`:
the student's rollouts of the OPD pool's first 24 `told` items, the teacher's argmax at the
first coordinate where a wrong second crop leaves the right one, without (a0) and with (aR) the
scripted critic's reflection). Recipes (`--recipes`, comma-separated):

- `demo`: the demo's own teacher SFT (all `teacher-data` rows + `teacher-told`), read back from
  `gates/revue.json` (not rerun);
- `told`: `teacher-told` rows only, `--steps` steps;
- `balanced`: `teacher-told` + as many `teacher-data` rows (its first ones), `--steps` steps;
- `contrast`: `told` rows rebuilt with 30% red plain rows that map the red key as a grey one
  (`ToldPlan(red_plain=0.3, red_plain_mapping="grey")`), `--steps` steps: the same prefix then
  crops cell k without a reflection and cell 9 - k with one, so only the reflection tells them
  apart.

Every run is an ordinary SFT / OPD run folder under `DEMO/pilot-teacher/` (a finished one is
read, not rerun).

    python benchmarks/demo2_teacher_pilot.py runs/demo --recipes told,balanced --steps 300
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

from beacon.benchmarks.synth_demo import render_once
from beacon.data.records import SFT_FILE
from beacon.demo.config import DemoConfig
from beacon.demo.data import EXPERT_TOLD, told_pool
from beacon.demo.pipeline import DemoStages, final_checkpoint
from beacon.demo.premises import REVUE_FILE, measure_teacher_probe
from beacon.demo.run import CONFIG_FILE
from beacon.demo.teacher_data import TEACHER_DATA
from beacon.demo.told_rows import TOLD_DATA, ToldPlan, build_told_rows
from beacon.jsonl import read_jsonl, write_jsonl_atomic


def demo_config(root: Path) -> DemoConfig:
    """The demo's settings as its folder recorded them."""
    import yaml

    return DemoConfig.model_validate(yaml.safe_load((root / CONFIG_FILE).read_text()))


def balanced_rows(root: Path, out: Path) -> str:
    """`teacher-data`'s first rows, as many as `teacher-told` has, in a folder of their own."""
    folder = out / "teacher-data-balanced"
    if not (folder / SFT_FILE).exists():
        told = len(list(read_jsonl(root / TOLD_DATA / SFT_FILE)))
        rows = itertools.islice(read_jsonl(root / TEACHER_DATA / SFT_FILE), told)
        write_jsonl_atomic(folder / SFT_FILE, list(rows))
    return str(folder.relative_to(root))


def contrast_rows(stages: DemoStages, root: Path) -> str:
    """The `contrast` recipe's `told` rows (built once, from the demo's expert run)."""
    folder = "pilot-teacher/teacher-told-contrast"
    if not (root / folder / SFT_FILE).exists():
        cfg = stages.cfg
        with render_once():
            pool = told_pool(cfg)
        plan = ToldPlan(red_plain=0.3, red_plain_mapping="grey")
        runs = [root / EXPERT_TOLD]
        seed, position = cfg.data.train_seed, cfg.revue.position
        build_told_rows(root, runs, pool, seed, position, plan, folder=folder)
    return folder


def probe(stages: DemoStages, teacher: Path, out: Path) -> dict:
    """The demo's decisive-token probe with `teacher` (read back when done)."""
    record = out / REVUE_FILE
    if record.exists():
        return json.loads(record.read_text())
    cfg = stages.opd_config("revue", 0, out / "probe")
    cfg = cfg.model_copy(update={"teacher": cfg.teacher.model_copy(update={"path": str(teacher)})})
    result = measure_teacher_probe(cfg, stages.cfg.revue.probe_items)
    values = {k: getattr(result, k) for k in ("a0_red", "ar_red", "a0_plain", "grounding")}
    record.write_text(json.dumps({**values, "probe_line": result.probe_line}, indent=2) + "\n")
    return json.loads(record.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("demo", type=Path, help="a finished beacon demo folder")
    parser.add_argument("--recipes", default="told,balanced")
    parser.add_argument("--steps", type=int, default=300, help="teacher SFT steps")
    args = parser.parse_args()
    root = args.demo.resolve()
    stages = DemoStages(demo_config(root).model_copy(update={"out": str(root), "progress": False}))
    v = stages.cfg.revue
    rows = [["demo", json.loads((root / "gates" / REVUE_FILE).read_text())]]
    for recipe in [r for r in args.recipes.split(",") if r and r != "demo"]:
        out = root / "pilot-teacher" / f"{recipe}-{args.steps}"
        if recipe == "told":
            data = [TOLD_DATA]
        elif recipe == "balanced":
            data = [balanced_rows(root, out.parent), TOLD_DATA]
        else:
            data = [contrast_rows(stages, root)]
        run_dir = out / "sft"
        stages.sft(
            run_dir, stages.teacher_source(), args.steps, data, v.teacher_lr, args.steps // 10
        )
        rows.append(
            [
                f"{recipe}, {args.steps} steps",
                probe(stages, final_checkpoint(run_dir, args.steps), out),
            ]
        )
    print("| teacher SFT | a0 red | aR red | a0 plain | grounding | probe |")
    print("|---|---|---|---|---|---|")
    for name, r in rows:
        cells = [f"{r.get(k):.2f}" if r.get(k) is not None else "-" for k in
                 ("a0_red", "ar_red", "a0_plain", "grounding")]  # fmt: skip
        print(f"| {name} | {' | '.join(cells)} | {r.get('probe_line', '')} |")


if __name__ == "__main__":
    main()
