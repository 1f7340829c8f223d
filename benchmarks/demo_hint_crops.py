"""Does the demo's region hint make a `search` digit readable? What a model does with it, measured.

A `synth_demo` search item's hint names the ninth of the image that holds the box. This reads a
`beacon eval` run of a model on `synth_demo_hinted` (the search items with the hint in the
question) and counts, from each episode's recorded crop box (`ToolCall.image_crops`), how often
the model cropped exactly the hinted ninth, how often its crop held the whole box, and how often
it then answered the digit right. Ten digits make 0.10 the rate of a guess. It then prints what
that guessing rate alone gives an HGCE group of G rollouts: P(at least one right) = 1 - (1 - p)^G,
the share of hinted groups a guess "rescues".

    beacon eval --model src/beacon/demo/assets/cold_start --bench synth_demo_hinted --limit 100 \\
        --modes tool --set agent.max_turns=2 --set agent.max_tool_calls=1 \\
        --set agent.max_new_tokens_per_turn=48 --out runs/hint-crops
    python benchmarks/demo_hint_crops.py runs/hint-crops
"""

from __future__ import annotations

import argparse
from pathlib import Path

from beacon.benchmarks.synth_demo import SynthDemoHinted
from beacon.config import load_config
from beacon.eval.config import EvalConfig
from beacon.jsonl import read_jsonl
from beacon.types import Trajectory

GUESS = 0.1  # one of ten digits


def holds(outer: tuple[int, ...], inner: list[int]) -> bool:
    """Whether box `outer` (x0, y0, x1, y1) contains box `inner` whole."""
    return (
        outer[0] <= inner[0]
        and outer[1] <= inner[1]
        and outer[2] >= inner[2]
        and outer[3] >= inner[3]
    )


def tally(run: Path) -> tuple[dict[str, int], dict[str, int]]:
    """Per kind of episode (all, cropped, cropped the hinted ninth, crop held the box): how many
    episodes of the run, and how many of them answered right."""
    cfg = load_config(EvalConfig, run / "config.yaml")
    items = {s.id: s for s in SynthDemoHinted().load(limit=cfg.limit, seed=cfg.seed)}
    correct = {
        r["key"]: bool(r["correct"])
        for r in read_jsonl(run / "samples.jsonl", whole=True)
        if r["benchmark"] == SynthDemoHinted.name and r["mode"] == "tool"
    }
    counts = {"episodes": 0, "cropped": 0, "hinted ninth": 0, "box held": 0}
    right = dict.fromkeys(counts, 0)
    for row in read_jsonl(run / "trajectories.jsonl", whole=True):
        trajectory = Trajectory.from_dict(row.get("trajectory", row))
        key = f"{SynthDemoHinted.name}/{trajectory.sample_id}/tool/0"
        if key not in correct:
            continue
        meta = items[trajectory.sample_id].metadata
        boxes = [c.box for call in trajectory.tool_calls for c in call.image_crops]
        kinds = ["episodes"]
        kinds += ["cropped"] if boxes else []
        kinds += ["hinted ninth"] if tuple(meta["cell"]) in boxes else []
        kinds += ["box held"] if any(holds(b, meta["region"]) for b in boxes) else []
        for kind in kinds:
            counts[kind] += 1
            right[kind] += correct[key]
    return counts, right


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a beacon eval run folder on synth_demo_hinted")
    parser.add_argument("--group-size", type=int, default=8, help="G of the HGCE groups (demo: 8)")
    args = parser.parse_args()
    counts, right = tally(args.run)
    model = load_config(EvalConfig, args.run / "config.yaml").engine.model
    print(f"{args.run}: {model} on {counts['episodes']} hinted search items")
    for kind, n in counts.items():
        rate = f"{right[kind] / n:.2f}" if n else "n/a"
        print(f"  {kind:13s} {n:4d}   answered right {right[kind]:4d}  ({rate}; a guess: {GUESS})")
    g = args.group_size
    p = right["episodes"] / counts["episodes"] if counts["episodes"] else 0.0
    print(f"P(>= 1 right of G = {g}): {1 - (1 - p) ** g:.2f} at this p = {p:.2f}; ", end="")
    print(f"{1 - (1 - GUESS) ** g:.2f} by guessing")


if __name__ == "__main__":
    main()
