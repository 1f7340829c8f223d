"""A balanced, seeded sample of an eval run's rollout groups for human labelling.

ReVuE (Appendix B.6) labels 96 groups of eight rollouts, 32 of each group type (all-correct,
mixed, all-wrong), one sampled rollout per group. Here a **group** is the K samples of one item
in tool mode (eval keys `bench/item/tool/k`, group id `bench/item/tool`); its type follows from
the records' `correct`. The sample is reproducible: groups and rollouts are drawn with
`random.Random(seed)` from id-sorted lists.

Limits:
- The eval records do not store the question text; it is recovered from the rollout's prompt
  segment (the user turn of a Qwen-style chat template, without Thyme's image path/size lines).
  With another template the whole prompt text is used.
- The images the sample refers to (original and tool outputs) are copied beside the output file,
  so the annotation set can be moved to another machine as one folder.
"""

from __future__ import annotations

import json
import logging
import random
import re
import shutil
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from beacon.eval.records import SAMPLES_FILE, TRAJECTORIES_FILE
from beacon.files import FileRefused, path_under
from beacon.images import ImageStore
from beacon.jsonl import read_jsonl
from beacon.types import Trajectory

logger = logging.getLogger(__name__)

GROUP_TYPES = ("all_correct", "mixed", "all_wrong")
IMAGES_DIR = "images"
"""Folder beside the sample file that holds the copied images (the rows' `image_root`)."""


@dataclass
class Group:
    """The tool-mode rollouts of one item, ordered by sample index k."""

    group_id: str
    records: list[dict[str, Any]]

    @property
    def group_type(self) -> str:
        """`all_correct`, `all_wrong` or `mixed`: the verdict mix that decides which critic prompt
        variant the group gets."""
        correct = [bool(r["correct"]) for r in self.records]
        return "all_correct" if all(correct) else "all_wrong" if not any(correct) else "mixed"


def tool_groups(run_dir: Path) -> list[Group]:
    """Groups of the run's tool-mode records, sorted by group id."""
    path = run_dir / SAMPLES_FILE
    if not path.exists():
        raise FileNotFoundError(
            f"{run_dir} has no {SAMPLES_FILE}; pass the output folder of `beacon eval` (--out)."
        )
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in read_jsonl(path):
        if record.get("mode") == "tool":
            by_group[f"{record['benchmark']}/{record['sample_id']}/tool"].append(record)
    if not by_group:
        raise ValueError(
            f"{path} has no tool-mode records; run `beacon eval --modes tool --set samples=8 "
            "--set agent.temperature=1.0` to get groups of rollouts."
        )
    return [Group(gid, sorted(rs, key=lambda r: r["k"])) for gid, rs in sorted(by_group.items())]


def draw(groups: list[Group], per_group_type: int, per_group: int, seed: int) -> list[dict]:
    """`per_group_type` groups of each type, `per_group` rollouts from each: the chosen records."""
    rng = random.Random(seed)
    chosen = []
    for group_type in GROUP_TYPES:
        pool = [g for g in groups if g.group_type == group_type]
        if len(pool) < per_group_type:
            logger.warning(
                "only %d %s groups in the run, %d asked for: taking all of them",
                len(pool),
                group_type,
                per_group_type,
            )
        for group in rng.sample(pool, min(per_group_type, len(pool))):
            picks = rng.sample(group.records, min(per_group, len(group.records)))
            chosen += [{**r, "group_type": group_type} for r in sorted(picks, key=lambda r: r["k"])]
    return chosen


def load_critic(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """Critic diagnoses keyed by (group_id, rollout_id).

    Accepts rows `{group_id, rollout_id, stage, discrepancy}` and per-group critic outputs
    `{group_id, rollout_diagnoses: [{rollout_id, stage, discrepancy}, ...]}`.
    """
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for number, row in enumerate(read_jsonl(path), start=1):
        diagnoses = row.get("rollout_diagnoses", [row])
        if "group_id" not in row or not all("rollout_id" in d and "stage" in d for d in diagnoses):
            raise ValueError(
                f"{path} line {number} is not a critic row: expected group_id with rollout_id, "
                "stage and discrepancy (or a rollout_diagnoses list of them)."
            )
        for d in diagnoses:
            critic = {"stage": d["stage"], "discrepancy": d.get("discrepancy", "")}
            out[(str(row["group_id"]), str(d["rollout_id"]))] = critic
    return out


def question_from_prompt(prompt: str) -> str:
    """The question inside a rendered first turn (see the module's limits)."""
    user = prompt.rsplit("<|im_start|>user\n", 1)[-1].split("<|im_end|>", 1)[0]
    user = re.sub(r"<\|vision_start\|>.*?<\|vision_end\|>", "", user, flags=re.S)
    user = re.split(r"\n\n### User Image Path:|\n\nThink step by step", user, maxsplit=1)[0]
    return user.strip()


def annotation_row(record: dict[str, Any], trajectory: Trajectory, critic: dict | None) -> dict:
    """One annotation JSONL line (docs/annotate.md) for an eval record and its trajectory."""
    prompt = trajectory.segments[0] if trajectory.segments else None
    return {
        "id": record["key"],
        "group_id": record["key"].rsplit("/", 1)[0],
        "group_type": record["group_type"],
        "rollout_id": record["k"],
        "question": question_from_prompt(prompt.text) if prompt else "",
        "reference": str(record.get("answer", "")),
        "images": [f"{IMAGES_DIR}/{k[:2]}/{k}.png" for k in (prompt.images if prompt else [])],
        "image_root": IMAGES_DIR,
        "trajectory": json.loads(trajectory.to_json()),
        "final_answer": record.get("prediction") or trajectory.final_answer,
        "correct": bool(record["correct"]),
        "benchmark": record.get("benchmark"),
        "critic": critic,
        "label": None,
    }


def sample_run(
    run_dir: Path,
    out: Path,
    per_group_type: int = 32,
    per_group: int = 1,
    seed: int = 0,
    critic_path: Path | None = None,
) -> list[dict]:
    """Draw the sample, copy its images beside `out`, write the annotation JSONL; return rows."""
    chosen = draw(tool_groups(run_dir), per_group_type, per_group, seed)
    trajectories = _trajectories(run_dir, {r["key"] for r in chosen})
    critic = load_critic(critic_path) if critic_path else {}
    source, target = ImageStore(run_dir / "images"), ImageStore(out.parent / IMAGES_DIR)
    rows = []
    for record in chosen:
        trajectory = trajectories.get(record["key"])
        if trajectory is None:
            logger.warning("no trajectory for %s in %s; left out", record["key"], TRAJECTORIES_FILE)
            continue
        _copy_images(trajectory, source, target)
        group_id, k = record["key"].rsplit("/", 1)[0], str(record["k"])
        rows.append(annotation_row(record, trajectory, critic.get((group_id, k))))
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return rows


def _trajectories(run_dir: Path, keys: set[str]) -> dict[str, Trajectory]:
    found = {}
    for line in read_jsonl(run_dir / TRAJECTORIES_FILE):
        if line.get("key") in keys:
            found[line["key"]] = Trajectory.from_dict(line["trajectory"])
    return found


def _copy_images(trajectory: Trajectory, source: ImageStore, target: ImageStore) -> None:
    """Copy the trajectory's stored images; a key whose file would lie outside either store (a
    crafted `../` key: a read and a write anywhere) or is no regular file is left out, logged."""
    for key in {k for s in trajectory.segments for k in s.images}:
        try:
            src = path_under(source.path(key), source.root)
            dst = path_under(target.path(key), target.root)
        except FileRefused as exc:
            logger.warning("image key %r of %s left out: %s", key, trajectory.sample_id, exc)
            continue
        if src.exists() and not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
