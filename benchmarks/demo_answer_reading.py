"""Why distillation moves the demo's student as it does: each model's reading of the answer digit
on the student's own held-out crops.

A finished full demo folder (`beacon demo`) holds the student before distillation, the teacher
and every OPD run. This scores each of them on the *same* sequences: the student's greedy tool-mode
episodes of the held-out evaluation (`eval/student/trajectories.jsonl`, same crops for everyone),
at the position that predicts the answer digit, and prints per category the mean entropy of that
distribution (nats), the mean probability of the right digit, and how often the arg-max is right.
A distilled student that becomes sharper (lower entropy) without a higher p(right) learned the
teacher's confidence, not its reading.

    python benchmarks/demo_answer_reading.py runs/demo
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import torch
from transformers import AutoModelForImageTextToText

from beacon.config import load_config
from beacon.demo.config import DemoConfig
from beacon.demo.pipeline import OPD_VARIANTS, DemoStages
from beacon.engines.tokenizer import HFTokenizer
from beacon.images import ImageStore
from beacon.jsonl import read_jsonl
from beacon.train.core.collate import PixelCache
from beacon.train.core.encode import encode_trajectory
from beacon.train.opd.score import SequenceScorer, supervised_positions
from beacon.types import Trajectory


def models(stages: DemoStages, seeds: int) -> dict[str, Path]:
    """The student, the teacher and every finished OPD run of the folder, by report label."""
    out = {"student (before)": stages.student_model(), "teacher": stages.teacher_model()}
    for variant in OPD_VARIANTS:
        for seed in range(seeds):
            path = stages.opd_model(variant, seed)
            if (path / "COMPLETE").exists():
                out[f"OPD {variant}-s{seed}"] = path
    return out


def _full_logits(hidden: torch.Tensor, head: torch.nn.Linear) -> torch.Tensor:
    """The full-vocabulary logits of `hidden` (one position here)."""
    return torch.nn.functional.linear(hidden, head.weight, head.bias)


def answer_reading(scorer: SequenceScorer, episodes: list[tuple], digit_id: dict[str, int]):
    """Per category: [entropy sum, p(right) sum, arg-max right, episodes]."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for category, answer, encoded in episodes:
        at = int(supervised_positions(encoded)[-2])  # "<answer>", digit, "</answer>"
        with torch.no_grad():
            logits = scorer.project(encoded, torch.tensor([at - 1]), _full_logits)[0]
        p = logits.softmax(-1)
        right = digit_id[answer]
        row = sums[category]
        row[0] += float(-(p * p.clamp_min(1e-12).log()).sum())
        row[1] += float(p[right])
        row[2] += float(int(logits.argmax()) == right)
        row[3] += 1
    return sums


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("demo", type=Path, help="a finished full demo folder (beacon demo)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(DemoConfig, args.demo / "demo.yaml")
    stages = DemoStages(cfg.model_copy(update={"out": str(args.demo.resolve())}))
    evaluated = args.demo / "eval" / "student"
    tokenizer = HFTokenizer.from_pretrained(stages.student_model())
    digit_id = {str(d): tokenizer.tokenizer.convert_tokens_to_ids(str(d)) for d in range(10)}
    records = {
        r["key"]: r
        for r in read_jsonl(evaluated / "samples.jsonl", whole=True)
        if r["mode"] == "tool" and r["used_tool"] and r["parsed"]
    }
    episodes = []
    for row in read_jsonl(evaluated / "trajectories.jsonl", whole=True):
        record = records.get(row["key"])
        if record is not None and record["answer"] in digit_id:
            trajectory = Trajectory.from_dict(row["trajectory"])
            episodes.append(
                (record["category"], record["answer"], encode_trajectory(trajectory, tokenizer))
            )
    store = ImageStore(evaluated / "images")
    pixels = PixelCache(tokenizer.processor.image_processor, store.get)
    print(f"{len(episodes)} greedy crop episodes of the student, scored by each model")
    print(f"| model | category | entropy (nats) | p(right) | arg-max right |\n|{'---|' * 5}")
    for label, path in models(stages, cfg.seeds).items():
        model = AutoModelForImageTextToText.from_pretrained(path).eval()
        sums = answer_reading(SequenceScorer(model, tokenizer, pixels), episodes, digit_id)
        for category, (entropy, p_right, right, n) in sorted(sums.items()):
            row = f"{entropy / n:.3f} | {p_right / n:.3f} | {right:.0f}/{n:.0f}"
            print(f"| {label} | {category} | {row} |")


if __name__ == "__main__":
    main()
