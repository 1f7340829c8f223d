"""Demo II's premise values (demo2_design §2.7), measured from the demo's own runs before any
compared arm; `beacon.demo.gates` judges them.

HGCE's, on the cold start, from two sampled eval runs of the `keyed` items GRPO will see (the RL
seed's first `keyed` items, `G` rollouts each at temperature 1): without the hint, the share of
rollouts whose first crop is the key (G-H1, p0), the share of items with a right rollout
(G-H2, pass@G) and the per-rollout success; with the hint, the per-rollout success (G-H3).

ReVuE's, on the teacher and the student, before OPD: the student's and the teacher's greedy
`told` evaluations (G-R2: the teacher on plain keys; G-R4: the student crops the key, then a
cell; its accuracy beside the teacher's), and the teacher's decisive-token probe and grounding
gate (G-R1, G-R3; `beacon.train.opd.decisive`) on the student's own rollouts of `told` items,
each scored by the teacher without and with the scripted critic's reflection, exactly as the
OPD trainer does (the probe's plain stratum is printed, not gated: it holds only the student's
wrong plain-key rollouts, which are few).

The probe's reference for a wrong rollout (`key_reference`): the rollout itself up to its second
crop, with that crop moved to the cell the key names. A rollout that cropped the key, noted it
and then cropped the wrong cell (a red key read as a grey one) leaves its reference first at a
coordinate of that crop: the decisive token. A correct sibling serves as well, but on red items
early in OPD most groups are all wrong (design §2.4), so they would have almost none.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from beacon.benchmarks.synth_keys import KEY_CELL, LAYOUT, RED_SHARE, grid_box, is_red, outer_cells
from beacon.data.eval_stages import run_trajectories
from beacon.demo.expert import crop_code
from beacon.demo.gates import HgcePremises, RevuePremises
from beacon.jsonl import write_atomic
from beacon.runfolder import has_run
from beacon.train.core.encode import encode_trajectory
from beacon.train.core.setup import open_run
from beacon.train.opd.config import OPD_OPERATIONAL_KEYS, OPDConfig
from beacon.train.opd.decisive import (
    DecisiveProbe,
    GroundingCase,
    GroundingGate,
    ProbeCase,
    decisive_probe,
    grounding_gate,
)
from beacon.train.opd.recipe import build_parts
from beacon.train.opd.step import Distilled, OPDParts, collect, collect_critic, submit_critic
from beacon.types import Trajectory

PROBE_SCOPE = "premises"
"""The probe's rollout seed scope: other rollouts than any OPD step's."""
HGCE_FILE, REVUE_FILE = "hgce.json", "revue.json"
"""In the demo's `gates/` folder: the measured premise values (`HgcePremises`, `RevuePremises`)."""


def crops(trajectory: Trajectory) -> list[tuple[int, ...]]:
    """The boxes a trajectory's executed crops cut, in order."""
    return [c.box for call in trajectory.tool_calls for c in call.image_crops if c is not None]


def key_box(kind: str) -> tuple[int, ...]:
    """The key's fixed box in the layout of `kind` (`synth_keys`)."""
    return grid_box(*KEY_CELL[LAYOUT[kind]])


def key_first(trajectory: Trajectory, kind: str) -> bool:
    """The first crop is the key."""
    boxes = crops(trajectory)
    return bool(boxes) and boxes[0] == key_box(kind)


def key_then_cell(trajectory: Trajectory, kind: str) -> bool:
    """The procedure a `told` question states: the key cropped, then one of the cells."""
    boxes = crops(trajectory)
    cells = {grid_box(*cell) for cell in outer_cells(LAYOUT[kind])}
    return len(boxes) >= 2 and boxes[0] == key_box(kind) and boxes[1] in cells


@dataclass(frozen=True)
class SampledRun:
    """A sampled eval run's episodes: per-rollout success, pass@k and the key-first share."""

    rollouts: int
    right: int
    items: int
    items_passed: int
    key_first: int
    items_mixed: int = 0
    """Items with both right and wrong rollouts."""
    items_split: int = 0
    """Items with rollouts whose first crop is the key and rollouts whose first crop is not."""

    @property
    def success(self) -> float | None:
        return self.right / self.rollouts if self.rollouts else None

    @property
    def pass_at_k(self) -> float | None:
        return self.items_passed / self.items if self.items else None

    @property
    def mixed(self) -> float | None:
        return self.items_mixed / self.items if self.items else None

    @property
    def split(self) -> float | None:
        return self.items_split / self.items if self.items else None

    @property
    def p_key_first(self) -> float | None:
        return self.key_first / self.rollouts if self.rollouts else None


def sampled_run(run: Path, kind: str = "keyed") -> SampledRun:
    """Count a tool-mode eval run of `kind` items (several samples per item)."""
    right, first = 0, 0
    outcomes: dict[tuple, set[bool]] = {}
    decisions: dict[tuple, set[bool]] = {}
    episodes = list(run_trajectories(run))
    for done in episodes:
        ok, took_key = bool(done.record["correct"]), key_first(done.trajectory, kind)
        right += ok
        first += took_key
        item = (done.record["benchmark"], done.trajectory.sample_id)
        outcomes.setdefault(item, set()).add(ok)
        decisions.setdefault(item, set()).add(took_key)
    passed = sum(True in seen for seen in outcomes.values())
    mixed = sum(len(seen) == 2 for seen in outcomes.values())
    split = sum(len(seen) == 2 for seen in decisions.values())
    return SampledRun(len(episodes), right, len(outcomes), passed, first, mixed, split)


def hgce_premises(unhinted: Path, hinted: Path) -> HgcePremises:
    """G-H1..G-H4 from the cold start's sampled runs on the RL `keyed` items."""
    plain, helped = sampled_run(unhinted), sampled_run(hinted)
    return HgcePremises(
        p_key_first=plain.p_key_first,
        pass_at_8=plain.pass_at_k,
        hinted_success=helped.success,
        unhinted_success=plain.success,
        hinted_mixed=helped.mixed,
        hinted_split=helped.split,
    )


def follows_procedure(run: Path) -> float | None:
    """Share of a greedy `told` run's episodes that crop the key, then a cell (G-R4)."""
    episodes = list(run_trajectories(run))
    if not episodes:
        return None
    return sum(key_then_cell(e.trajectory, "told") for e in episodes) / len(episodes)


def accuracy(run: Path, keep: Callable[[dict], bool] = lambda record: True) -> float | None:
    """Share of right answers in an eval run, over the records `keep` accepts."""
    episodes = [e for e in run_trajectories(run) if keep(e.record)]
    return sum(bool(e.record["correct"]) for e in episodes) / len(episodes) if episodes else None


def red_key(record: Mapping[str, Any]) -> bool:
    """A held-out `told` record whose key is red (`synth_keys.is_red` over its item index)."""
    return is_red(int(record["sample_id"]), RED_SHARE)


def plain_key(record: Mapping[str, Any]) -> bool:
    """A held-out `told` record whose key is grey (G-R2's stratum)."""
    return not red_key(record)


def key_reference(trajectory: Trajectory, target: Sequence[int]) -> Trajectory | None:
    """The rollout up to its second code segment, that segment cropping `target` instead
    (module docstring); None when the rollout has no second code segment."""
    codes = [j for j, s in enumerate(trajectory.segments) if s.kind == "code"]
    if len(codes) < 2:
        return None
    j = codes[1]
    moved = replace(
        trajectory.segments[j],
        text=f"\n```python\n{crop_code(target)}\n```\n",
        token_ids=[],
        loss_mask=[],
        logprobs=None,
    )
    return replace(trajectory, segments=[*trajectory.segments[:j], moved], tool_calls=[])


def probe_cases(parts: OPDParts, distilled: Iterable[Distilled]) -> list[ProbeCase]:
    """A case per wrong `told` rollout with a second code segment (under `keys_agent`, one crop
    per call: a second crop): its `key_reference`, stratum = key colour (`red` / `grey`)."""
    out = []
    for d in distilled:
        meta = d.group.sample.metadata
        if meta.get("kind") != "told":
            continue
        for i, ok in enumerate(d.labels):
            reference = None if ok else key_reference(d.group.trajectories[i], meta["region"])
            if reference is not None:
                encoded = encode_trajectory(reference, parts.tokenizer, parts.store.header)
                out.append(ProbeCase(d, i, encoded, meta["colour"]))
    return out


def grounding_cases(parts: OPDParts, distilled: Iterable[Distilled]) -> list[GroundingCase]:
    """A case per `told` rollout whose last crop is a cell other than the target and whose
    answer is the digit that cell shows (the answer its evidence supports): does the
    reflection-conditioned teacher still write it there?"""
    out = []
    for d in distilled:
        meta = d.group.sample.metadata
        if meta.get("kind") != "told":
            continue
        cells = [tuple(b) for b in meta["cell_boxes"]]
        for i, trajectory in enumerate(d.group.trajectories):
            boxes = crops(trajectory)
            if not boxes or boxes[-1] not in cells or list(boxes[-1]) == meta["region"]:
                continue
            shown = str(meta["digits"][cells.index(boxes[-1])])
            if trajectory.final_answer != shown:  # its answer position is where it wrote d
                continue
            token = parts.tokenizer.tokenizer.convert_tokens_to_ids(shown)
            out.append(GroundingCase(d, i, int(token)))
    return out


@dataclass(frozen=True)
class TeacherProbe:
    """The probe's and the gate's results, as the report prints them."""

    a0_red: float | None
    ar_red: float | None
    a0_plain: float | None
    grounding: float | None
    probe_line: str
    grounding_line: str


def teacher_probe(parts: OPDParts, distilled: list[Distilled]) -> TeacherProbe:
    """G-R1..G-R3 on `distilled` (rollouts with the critic's reflections collected)."""
    probe: DecisiveProbe = decisive_probe(parts, probe_cases(parts, distilled))
    gate: GroundingGate = grounding_gate(parts, grounding_cases(parts, distilled))
    by_name = {s.stratum: s for s in probe.strata}
    red, grey = by_name.get("red"), by_name.get("grey")
    return TeacherProbe(
        a0_red=red.a0_reflected if red else None,
        ar_red=red.a_r if red else None,
        a0_plain=grey.a0 if grey else None,
        grounding=gate.share,
        probe_line=probe.line(),
        grounding_line=gate.line(),
    )


def measure_teacher_probe(cfg: OPDConfig, items: int) -> TeacherProbe:
    """`teacher_probe` with the parts an OPD run of `cfg` builds (its student, teacher, critic
    and agent loop; the run folder `train.output_dir` holds the rollouts' images and the
    critic's exchanges), on the student's rollouts of the pool's first `items` `told` items."""
    accelerator, run_dir = open_run(cfg, has_run(Path(cfg.train.output_dir)), OPD_OPERATIONAL_KEYS)
    with contextlib.ExitStack() as stack:
        parts = build_parts(cfg, accelerator, run_dir, stack)
        told = [s for s in parts.samples if s.metadata.get("kind") == "told"][:items]
        if not told:
            raise ValueError(f"data.benchmark={cfg.data.benchmark} has no told items to probe")
        distilled, _ = collect(parts, told, list(range(len(told))), PROBE_SCOPE)
        submit_critic(parts, distilled, 0)
        collect_critic(distilled)
        return teacher_probe(parts, distilled)


def revue_premises(probe: dict[str, Any], student_told: Path, teacher_told: Path) -> RevuePremises:
    """G-R1..G-R4 from the teacher probe's record and the two `told` evaluations."""
    return RevuePremises(
        a0_red=probe.get("a0_red"),
        ar_red=probe.get("ar_red"),
        teacher_plain=accuracy(teacher_told, plain_key),
        grounding=probe.get("grounding"),
        follows_procedure=follows_procedure(student_told),
        student_told=accuracy(student_told),
        teacher_told=accuracy(teacher_told),
    )


def write_record(path: Path, record: Any) -> None:
    """A premise dataclass as JSON (written atomically: a stage is done once it exists)."""
    write_atomic(path, json.dumps(asdict(record), indent=2) + "\n")


def read_record(path: Path) -> dict[str, Any]:
    """A premise record, or {} when it was not measured."""
    return json.loads(path.read_text()) if path.exists() else {}
