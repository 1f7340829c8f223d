"""Do the demo's models see a `told` key's colour? P(the key note ends in "." | key colour).

After cropping a `told` key, the demo's models write `Key: k.` (grey) or `Key: k red.` (red), so
the token after the digit is where the key's colour shows, if the model sees it. This reads the
held-out `told` evaluations of a finished `beacon demo` folder (`eval/told-teacher`,
`eval/told-student`; greedy episodes with the engine's log-probs of the tokens written) and
prints, per model and key colour, how often " red." was written and P("."): the written
token's probability where "." was written, one minus it where " red" was (the two notes the
models write; other tokens there are counted as neither). Equal values on red and grey keys
mean the colour is not seen: the note is the same guess either way.

    python benchmarks/demo2_colour_note.py runs/demo
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from pathlib import Path

from beacon.data.eval_stages import run_trajectories
from beacon.demo.expert import KEY_NOTE, RED_NOTE
from beacon.demo.premises import red_key

NOTE_END = 2
"""The note's token after the digit: `Key: ` and the digit are one token each (demo phrases)."""


def colour_note(run: Path) -> dict[str, tuple[float, float, int]]:
    """Key colour -> (mean P(".") after the digit, share of notes with " red.", episodes)."""
    seen: dict[str, list[tuple[float, bool]]] = defaultdict(list)
    for done in run_trajectories(run):
        for segment in done.trajectory.segments:
            if segment.role == "generated" and segment.text.startswith(KEY_NOTE):
                if segment.logprobs and len(segment.logprobs) > NOTE_END:
                    p_written = math.exp(segment.logprobs[NOTE_END])
                    red = RED_NOTE in segment.text
                    colour = "red" if red_key(done.record) else "grey"
                    seen[colour].append((1.0 - p_written if red else p_written, red))
                break
    return {
        colour: (sum(p for p, _ in v) / len(v), sum(r for _, r in v) / len(v), len(v))
        for colour, v in sorted(seen.items())
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("demo", type=Path, help="a finished beacon demo folder")
    args = parser.parse_args()
    runs = [args.demo / "eval" / f"told-{model}" for model in ("teacher", "student")]
    missing = [str(run) for run in runs if not run.is_dir()]
    if missing:
        parser.error(f"no held-out `told` evaluation at {', '.join(missing)}: run `beacon demo`")
    print('| model | key | P(".") after the digit | writes " red." | episodes |')
    print("|---|---|---|---|---|")
    for run in runs:
        model = run.name.removeprefix("told-")
        for colour, (p_dot, red, n) in colour_note(run).items():
            print(f"| {model} | {colour} | {p_dot:.3f} | {red:.2f} | {n} |")


if __name__ == "__main__":
    main()
