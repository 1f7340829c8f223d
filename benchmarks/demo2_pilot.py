"""Pilot of the demo's second task (`synth_keys`): do its premises hold for the shipped cold start?

Design: `../shared/research/demo2_design.md` §2.7. On CPU (torch threads `--threads`), greedy
tool mode unless said otherwise, `--items` held-out items per set (seed 2):

1. **Reading** (the cold start, no new training): each box asked about by its coordinates in
   `synth_demo`'s question form ("What digit is inside the box at (...)?"), the form the cold
   start was trained on: an outer cell (layout K), the corner key (grey and red ink) and the
   centre key. This is the premise that perception does not stand in for either method.
2. **The cold start on the new kinds**: accuracy and the first crop (key box, target box, another
   cell, elsewhere, none) on `marked`, `keyed`, `keyed` with the hint, `told`.
3. **A short SFT** of the cold start on the scripted expert's `synth_keys` rows (`--sft-steps`,
   training seed 1: `marked` `--marked-rows` (400), `told` 600 with 2% red keys, hinted `keyed`
   300, unhinted `keyed` `--unhinted-keyed` (6)), then the gates on the fine-tuned model:
   - G-H1: unhinted `keyed`, sampled (T = 1, `--samples` per item): P(first crop = key), target
     0.02-0.10;
   - G-H2: unhinted `keyed` pass@`--samples`, target <= 0.5;
   - G-H3: hinted `keyed` per-rollout success, target >= 0.5 and >= 3x the unhinted rate;
   - G-R4: greedy `told`: the share of episodes that crop the key, then a cell (target >= 0.9),
     and `told` accuracy by key colour; `marked` accuracy (over-applied key-first shows there).

Each table row also gives the decisions along the chain: the key noted right (`Key: k`), the
second crop on the target, the answer equal to the digit of the last cropped cell (grounded
reading), and pass@k over the item's samples. Every run is an ordinary `beacon eval` / `beacon
train sft` folder under `--out` (resumable: a finished folder is read, not rerun). Figures and
commands: benchmarks/RESULTS.md.

    python benchmarks/demo2_pilot.py --out runs/demo2-pilot --items 60
"""

from __future__ import annotations

import argparse
import logging
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from beacon.benchmarks.base import Benchmark, register
from beacon.benchmarks.synth_demo import coords, render_once
from beacon.benchmarks.synth_keys import (
    KEYED_HINTED,
    SynthKeysKeyed,
    SynthKeysTold,
    generate,
)
from beacon.data.eval_stages import run_trajectories
from beacon.data.records import SFT_FILE
from beacon.data.scripted_expert import create_scripted_app
from beacon.demo.data import write_sft_set
from beacon.demo.expert import MODEL_NAME, ScriptedDemoExpert, keys_agent
from beacon.demo.pipeline import shipped_cold_start
from beacon.engines.config import EngineConfig
from beacon.engines.serve import run_app_in_thread
from beacon.eval.config import EvalConfig
from beacon.eval.runner import run_eval
from beacon.runfolder import has_run, read_summary
from beacon.types import Sample

EVAL_SEED, TRAIN_SEED = 2, 1
SFT_RED_SHARE = 0.02  # design §2.5: red keys are rare in plain `told` rows


def box_question(sample: Sample, box: list[int], answer: int, probe: str) -> Sample:
    """`sample` asked about one box by its coordinates, as `synth_demo` asks."""
    meta = {**sample.metadata, "category": probe, "probe_box": box}
    question = f"What digit is inside the box at {coords(tuple(box))}?"
    return replace(sample, question=question, answer=str(answer), metadata=meta)


@register
class ReadBoxes(Benchmark):
    """Pilot only: per `told` item (layout K) and `keyed` item (layout C) of the eval seed, the
    target cell, the corner key and the centre key, each asked by its coordinates."""

    name = "pilot_keys_read"
    categories = ("cell", "corner key grey", "corner key red", "centre key")

    def load(self, path=None, limit: int | None = None, seed: int = 0) -> Iterator[Sample]:
        """`limit` probes (default 180): three per pair of items, in turn."""
        total = 180 if limit is None else limit
        for number in range(total):
            i, n = divmod(number, 3)
            if n == 2:
                keyed = generate(seed, i, "keyed")
                k = keyed.metadata
                probe = box_question(keyed, k["key_box"], k["key"], "centre key")
            else:
                told = generate(seed, i, "told")
                m = told.metadata
                probe = (
                    box_question(told, m["region"], int(told.answer), "cell")
                    if n == 0
                    else box_question(told, m["key_box"], m["key"], f"corner key {m['colour']}")
                )
            yield replace(probe, id=str(number), benchmark=self.name)


@register
class SftTold(SynthKeysTold):
    """Pilot only: `told` items with the SFT set's 2% red keys."""

    name = "pilot_keys_told_sft"

    def __init__(self) -> None:
        super().__init__(red_share=SFT_RED_SHARE)


def evaluate(
    out: Path,
    model: Path,
    benches: list[str],
    limit: int,
    seed: int = EVAL_SEED,
    samples: int = 1,
    engine: EngineConfig | None = None,
    ids: dict[str, list[str]] | None = None,
) -> Path:
    """A tool-mode eval run (greedy, or T = 1 with `samples` > 1); skipped when done."""
    if read_summary(out):
        return out
    agent = keys_agent()
    if samples > 1:
        agent = agent.model_copy(update={"temperature": 1.0})
    cfg = EvalConfig(
        engine=engine or EngineConfig(name="hf", model=str(model), device="cpu", batch_size=32),
        agent=agent,
        benchmarks=benches,
        limit=limit,
        ids=ids,
        modes=["tool"],
        samples=samples,
        concurrency=32,
        seed=seed,
        out=str(out),
        bootstrap=0,
        report=False,
    )
    run_eval(cfg, progress=False)
    return out


def first_crop(sample: Sample, boxes: list[tuple[int, ...]]) -> str:
    """What an episode cropped first: the key box, the target box, another cell, elsewhere."""
    if not boxes:
        return "none"
    meta, box = sample.metadata, list(boxes[0])
    if box == meta["key_box"]:
        return "key"
    if box == meta["region"]:
        return "target"
    return "other cell" if box in meta["cell_boxes"] else "elsewhere"


def shown_digit(sample: Sample, boxes: list[tuple[int, ...]]) -> str | None:
    """The digit in the outer cell the episode cropped last (None: its last crop is no cell)."""
    meta = sample.metadata
    if not boxes or list(boxes[-1]) not in meta["cell_boxes"]:
        return None
    return str(meta["digits"][meta["cell_boxes"].index(list(boxes[-1]))])


def tally(run: Path, items: dict[tuple[str, str], Sample]) -> dict[str, Counter]:
    """Per benchmark (and key colour): episodes, right answers, first crops, the key-then-cell
    procedure, and per-item right counts (for pass@k)."""
    out: dict[str, Counter] = {}
    for done in run_trajectories(run):
        record, traj = done.record, done.trajectory
        sample = items[(record["benchmark"], traj.sample_id)]
        boxes = [c.box for call in traj.tool_calls for c in call.image_crops if c is not None]
        text = "".join(seg.text for seg in traj.segments if seg.role == "generated")
        name = record["benchmark"]
        if sample.metadata["kind"] == "told":
            name = f"{name} ({sample.metadata['colour']})"
        for key in dict.fromkeys((record["benchmark"], name)):
            c = out.setdefault(key, Counter())
            c["episodes"] += 1
            c["right"] += bool(record["correct"])
            c[f"first: {first_crop(sample, boxes)}"] += 1
            procedure = (
                len(boxes) >= 2
                and list(boxes[0]) == sample.metadata["key_box"]
                and list(boxes[1]) in sample.metadata["cell_boxes"]
            )
            c["key then cell"] += procedure
            note = re.search(r"Key: (\d)", text)
            c["key noted right"] += bool(note) and int(note.group(1)) == sample.metadata["key"]
            c["second crop = target"] += (
                len(boxes) >= 2 and list(boxes[1]) == sample.metadata["region"]
            )
            c["answer = last crop's digit"] += record.get("prediction") == shown_digit(
                sample, boxes
            )
            c[f"item:{traj.sample_id}"] += bool(record["correct"])
            c[f"seen:{traj.sample_id}"] += 1
    return out


def print_table(title: str, counts: dict[str, Counter]) -> None:
    print(f"\n{title}")
    print(
        "| set | n | accuracy | first crop: key / target / other cell / elsewhere / none "
        "| key then cell | key noted right | 2nd crop = target | answer = last crop's digit "
        "| pass@k |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, c in sorted(counts.items()):
        n = c["episodes"]
        firsts = " / ".join(
            f"{c[f'first: {k}'] / n:.2f}"
            for k in ("key", "target", "other cell", "elsewhere", "none")
        )
        seen = [k for k in c if k.startswith("seen:")]
        passed = sum(c["item:" + k[5:]] > 0 for k in seen) / len(seen) if seen else 0.0
        rates = " | ".join(
            f"{c[k] / n:.2f}"
            for k in (
                "key then cell",
                "key noted right",
                "second crop = target",
                "answer = last crop's digit",
            )
        )
        print(f"| {name} | {n} | {c['right'] / n:.2f} | {firsts} | {rates} | {passed:.2f} |")


def load_items(benches: list[str], limit: int, seed: int) -> dict[tuple[str, str], Sample]:
    from beacon.benchmarks import get_benchmark

    return {
        (name, s.id): s
        for name in benches
        for s in get_benchmark(name).load(limit=limit, seed=seed)
    }


def build_sft_rows(root: Path, unhinted_keyed: int, marked: int) -> dict[str, int]:
    """The scripted expert's episodes on the training seed's items -> `root/sft/`."""
    if read_summary(root / "sft"):
        return read_summary(root / "sft")
    sets = {  # benchmark -> (first index, rows); unhinted keyed items are not the hinted ones
        "synth_keys_marked": (0, marked),
        SftTold.name: (0, 600),
        KEYED_HINTED: (0, 300),
        SynthKeysKeyed.name: (300, unhinted_keyed),
    }
    sets = {name: span for name, span in sets.items() if span[1]}
    limit = max(start + count for start, count in sets.values())
    items = list(load_items(list(sets), limit, TRAIN_SEED).values())
    ids = {
        name: [s.id for s in items if s.benchmark == name][start : start + count]
        for name, (start, count) in sets.items()
    }
    server = run_app_in_thread(
        create_scripted_app(ScriptedDemoExpert(items), model_name=MODEL_NAME)
    )
    try:
        engine = EngineConfig(name="openai", model=MODEL_NAME, base_url=server.base_url)
        evaluate(root / "expert", Path(), list(sets), limit, TRAIN_SEED, engine=engine, ids=ids)
    finally:
        server.stop()
    return write_sft_set(root, [root / "expert"])


def sft(root: Path, steps: int, lr: float) -> Path:
    """`steps` of SFT of the shipped cold start on `root/sft` (the demo's SFT settings)."""
    from beacon.train.sft import SFTConfig, run_sft

    run_dir = root / f"sft-run-{steps}"
    final = run_dir / f"checkpoint-{steps}"
    if (final / "COMPLETE").exists():
        return final
    cfg = SFTConfig.model_validate(
        {
            "model": {"path": str(shipped_cold_start())},
            "data": {
                "train": [str(root / "sft" / SFT_FILE)],
                "images": str(root / "sft" / "images"),
                "max_length": 1024,
            },
            "train": {
                "output_dir": str(run_dir),
                "seed": 0,
                "max_steps": steps,
                "lr": lr,
                "max_grad_norm": 1.0,
                "save_every": steps,
                "keep_last": 1,
                "log_every": max(1, steps // 10),
                "progress_bar": False,
                "global_batch_size": 32,
                "warmup_steps": min(max(1, steps // 10), steps - 1),
                "weight_decay": 0.01,
                "betas": (0.9, 0.98),
            },
        }
    )
    run_sft(cfg, resume=has_run(run_dir))
    return final


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--items", type=int, default=60, help="held-out items per set")
    parser.add_argument("--samples", type=int, default=8, help="sampled rollouts per item (G)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--sft-steps", type=int, default=300, help="0: the cold start only")
    parser.add_argument("--lr", type=float, default=2e-3, help="SFT learning rate")
    parser.add_argument("--unhinted-keyed", type=int, default=6, help="N_u: unhinted keyed rows")
    parser.add_argument("--marked-rows", type=int, default=400, help="marked SFT rows")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    kinds = ["synth_keys_marked", "synth_keys_keyed", KEYED_HINTED, "synth_keys_told"]
    n, out = args.items, args.out
    with render_once():
        items = {
            **load_items(kinds, n, EVAL_SEED),
            **load_items([ReadBoxes.name], 3 * n, EVAL_SEED),
        }
        cold = shipped_cold_start()
        start = time.perf_counter()
        run = evaluate(out / "cold-read", cold, [ReadBoxes.name], 3 * n)
        counts = {}
        for done in run_trajectories(run):
            cat = items[(ReadBoxes.name, done.trajectory.sample_id)].metadata["category"]
            boxes = [c.box for call in done.trajectory.tool_calls for c in call.image_crops if c]
            probe = items[(ReadBoxes.name, done.trajectory.sample_id)].metadata["probe_box"]
            c = counts.setdefault(cat, Counter())
            c["n"] += 1
            c["right"] += bool(done.record["correct"])
            c["cropped the box"] += bool(boxes) and list(boxes[0]) == probe
        print(f"\n1. Reading, cold start ({cold}), greedy tool mode, seed {EVAL_SEED}")
        print("| box | n | read right | cropped exactly the box |")
        print("|---|---|---|---|")
        for cat, c in sorted(counts.items()):
            print(
                f"| {cat} | {c['n']} | {c['right'] / c['n']:.2f} | "
                f"{c['cropped the box'] / c['n']:.2f} |"
            )
        run = evaluate(out / "cold-kinds", cold, kinds, n)
        print_table("2. Cold start on the kinds, greedy", tally(run, items))
        run = evaluate(
            out / "cold-keyed-sampled", cold, ["synth_keys_keyed"], n, samples=args.samples
        )
        print_table(
            f"2b. Cold start, unhinted keyed, T = 1, {args.samples} per item", tally(run, items)
        )
        print(f"(phases 1-2: {time.perf_counter() - start:.0f} s)")
        if not args.sft_steps:
            return
        start = time.perf_counter()
        rows = build_sft_rows(out, args.unhinted_keyed, args.marked_rows)
        print(f"\nSFT rows: {rows}")
        model = sft(out, args.sft_steps, args.lr)
        print(f"SFT {args.sft_steps} steps: {time.perf_counter() - start:.0f} s")
        tag = f"sft{args.sft_steps}"
        run = evaluate(out / f"{tag}-kinds", model, kinds, n)
        print_table(f"3. After {tag}, greedy (G-R4: told 'key then cell')", tally(run, items))
        run = evaluate(
            out / f"{tag}-sampled",
            model,
            ["synth_keys_keyed", KEYED_HINTED],
            n,
            samples=args.samples,
        )
        counts = tally(run, items)
        print_table(f"3b. After {tag}, T = 1, {args.samples} per item (G-H1..3)", counts)
        unhinted, hinted = counts.get("synth_keys_keyed"), counts.get(KEYED_HINTED)
        if unhinted and hinted:
            p0 = unhinted["first: key"] / unhinted["episodes"]
            u_rate = unhinted["right"] / unhinted["episodes"]
            h_rate = hinted["right"] / hinted["episodes"]
            print(f"G-H1 P(key first | unhinted) = {p0:.3f} (target 0.02-0.10)")
            print(
                f"G-H3 hinted per-rollout success = {h_rate:.2f} vs unhinted {u_rate:.2f} "
                "(target >= 0.5 and >= 3x)"
            )


if __name__ == "__main__":
    main()
