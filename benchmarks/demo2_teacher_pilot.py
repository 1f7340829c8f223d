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
- `balanced`: `teacher-told` + as many `teacher-data` rows (its first ones), `--steps` steps.

Every run is an ordinary SFT / OPD run folder under `DEMO/pilot-teacher/` (a finished one is
read, not rerun).

    python benchmarks/demo2_teacher_pilot.py runs/demo --recipes told,balanced --steps 300
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from beacon.data.records import SFT_FILE
from beacon.demo.config import DemoConfig
from beacon.demo.pipeline import DemoStages, final_checkpoint
from beacon.demo.premises import REVUE_FILE, measure_teacher_probe
from beacon.demo.run import CONFIG_FILE
from beacon.demo.teacher_data import TEACHER_DATA
from beacon.demo.told_rows import TOLD_DATA
from beacon.jsonl import read_jsonl, write_jsonl_atomic


def demo_config(root: Path) -> DemoConfig:
    """The demo's settings as its folder recorded them."""
    import yaml

    return DemoConfig.model_validate(yaml.safe_load((root / CONFIG_FILE).read_text()))


def balanced_rows(root: Path, out: Path) -> str:
    """`teacher-data`'s first rows, as many as `teacher-told` has, in a folder of their own."""
    folder = out / "teacher-data-balanced"
    if not (folder / SFT_FILE).exists():
        told = len(read_jsonl(root / TOLD_DATA / SFT_FILE))
        write_jsonl_atomic(folder / SFT_FILE, read_jsonl(root / TEACHER_DATA / SFT_FILE)[:told])
    return str(folder.relative_to(root))


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
        data = [TOLD_DATA] if recipe == "told" else [balanced_rows(root, out.parent), TOLD_DATA]
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
