"""The eval-backed stages: `difficulty` (pass@k of the base model) and `expert` (verified
expert trajectories, mixed with correct text-only base trajectories into the SFT set).

Both stages *are* eval runs (`beacon.eval.runner.run_eval`): the episodes are resumable after
`kill -9`, concurrent and shown with a progress bar by the runner; this module only chooses
what to run and reads the runs' samples.jsonl and trajectories.jsonl back. Folder layout under
`DataConfig.out`:

    difficulty/run/          the eval run (K samples per item, one mode)
    difficulty/selected.jsonl, difficulty/summary.json
    expert/run/              the expert's eval run, restricted to the selected ids
    expert/verified.jsonl    verified expert trajectories (Trajectory JSON, one per line)
    expert/summary.json
    sft/trajectories.jsonl   the SFT set: verified expert + mixed text-only base trajectories
    sft/images/              the ImageStore those trajectories reference
"""

from __future__ import annotations

import logging
import random
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from beacon.data.config import DataConfig
from beacon.data.pool import load_samples
from beacon.data.records import SFT_FILE, ItemRef, StageSummary
from beacon.data.refine import REFINED_FILE, refine_all
from beacon.data.selection import pass_counts, select_hard
from beacon.eval.config import EvalConfig
from beacon.eval.records import SAMPLES_FILE, TRAJECTORIES_FILE
from beacon.eval.runner import build_engine, run_eval
from beacon.images import ImageStore
from beacon.jsonl import read_jsonl, write_jsonl_atomic
from beacon.types import Trajectory

logger = logging.getLogger(__name__)

SELECTED_FILE = "selected.jsonl"
VERIFIED_FILE = "verified.jsonl"


@dataclass
class RunTrajectory:
    """A finished episode of an eval run with the record the runner scored it by."""

    record: dict[str, Any]
    trajectory: Trajectory


def difficulty_eval_config(cfg: DataConfig) -> EvalConfig:
    """The eval run that samples the base model K times per pool item in one mode."""
    d = cfg.difficulty
    return EvalConfig(
        engine=d.engine,
        agent=d.agent,
        sandbox=d.sandbox,
        benchmarks=list(cfg.pool.benchmarks),
        data=dict(cfg.pool.data),
        limit=cfg.pool.limit,
        modes=[d.mode],
        samples=d.k,
        concurrency=d.concurrency,
        seed=cfg.pool.seed,
        out=str(cfg.root / "difficulty" / "run"),
        bootstrap=0,
        report=False,
    )


def run_difficulty(cfg: DataConfig, progress: bool = True) -> StageSummary:
    """Sample, count, select; write selected.jsonl and summary.json."""
    eval_cfg = difficulty_eval_config(cfg)
    run_eval(eval_cfg, progress=progress)
    records = read_jsonl(Path(eval_cfg.out) / SAMPLES_FILE)
    selection = select_hard(
        pass_counts(records, cfg.difficulty.mode), cfg.difficulty.k, cfg.difficulty.max_correct
    )
    folder = cfg.root / "difficulty"
    rows = [
        {"benchmark": e.item.benchmark, "sample_id": e.item.sample_id, "correct": e.correct}
        for e in selection.kept
    ]
    write_jsonl_atomic(folder / SELECTED_FILE, rows)
    selection.summary.write(folder)
    logger.info("%s", selection.summary.line())
    return selection.summary


def read_selected(cfg: DataConfig) -> list[ItemRef]:
    path = cfg.root / "difficulty" / SELECTED_FILE
    if not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist; run `beacon data difficulty` with this config first"
        )
    return [ItemRef(r["benchmark"], str(r["sample_id"])) for r in read_jsonl(path)]


def expert_eval_config(cfg: DataConfig, items: list[ItemRef]) -> EvalConfig:
    """The expert's tool-mode eval run, restricted to the selected items."""
    x = cfg.expert
    ids: dict[str, list[str]] = {}
    for item in items:
        ids.setdefault(item.benchmark, []).append(item.sample_id)
    return EvalConfig(
        engine=x.engine,
        agent=x.agent,
        sandbox=x.sandbox,
        benchmarks=[b for b in cfg.pool.benchmarks if b in ids],
        data=dict(cfg.pool.data),
        limit=cfg.pool.limit,
        ids=ids,
        modes=["tool"],
        samples=1,
        concurrency=x.concurrency,
        seed=cfg.pool.seed,
        out=str(cfg.root / "expert" / "run"),
        bootstrap=0,
        report=False,
    )


def run_expert(cfg: DataConfig, progress: bool = True) -> StageSummary:
    """Solve the selected items with the expert; keep verified trajectories; build the SFT set."""
    items = read_selected(cfg)
    folder = cfg.root / "expert"
    summary = StageSummary(stage="expert", total=len(items))
    verified: list[RunTrajectory] = []
    if items:
        eval_cfg = expert_eval_config(cfg, items)
        run_eval(eval_cfg, progress=progress)
        wanted = {item.key for item in items}
        for done in run_trajectories(Path(eval_cfg.out)):
            if f"{done.record['benchmark']}/{done.record['sample_id']}" not in wanted:
                continue  # an earlier selection's episode in the same run folder
            reason = expert_drop_reason(done)
            if reason is None:
                verified.append(tag(done, "expert"))
            else:
                summary.drop(reason)
        missing = len(items) - len(verified) - sum(summary.dropped.values())
        if missing > 0:
            summary.dropped["not_run"] = missing
    summary.kept = len(verified)
    if cfg.expert.refine and verified:
        refine_verified(cfg, verified, summary, progress)
    write_jsonl_atomic(folder / VERIFIED_FILE, (v.trajectory.to_json() for v in verified))
    mixed = mix_text_only(cfg, len(verified))
    rows = build_sft_set(cfg, verified, mixed)
    summary.extra.update({"text_only_mixed": len(mixed), "sft_rows": rows})
    summary.write(folder)
    logger.info("%s; SFT set: %d rows (%d text-only)", summary.line(), rows, len(mixed))
    return summary


def refine_verified(
    cfg: DataConfig, verified: list[RunTrajectory], summary: StageSummary, progress: bool
) -> None:
    """Replace the verified trajectories by their adopted rewrites (beacon.data.refine)."""
    trajectories = [v.trajectory for v in verified]
    engine = build_engine(cfg.expert.engine)
    try:
        samples = load_samples(cfg, trajectories)
        folder = cfg.root / "expert"
        refined = refine_all(engine, trajectories, samples, folder, progress)
    finally:
        engine.close()
    for done, traj in zip(verified, refined, strict=True):
        done.trajectory = traj
    summary.extra["refined"] = sum(bool(t.metadata.get("refined")) for t in refined)
    kept_keys = {t.metadata["eval_key"] for t in trajectories}
    rejected: dict[str, int] = {}
    for outcome in read_jsonl(folder / REFINED_FILE):
        if outcome["key"] in kept_keys and outcome["reason"]:
            rejected[outcome["reason"]] = rejected.get(outcome["reason"], 0) + 1
    summary.extra["refine_rejected"] = rejected


def expert_drop_reason(done: RunTrajectory, require_tool: bool = True) -> str | None:
    """Why an expert episode is not training data (None: keep it).

    The cold-start SFT set wants code-assisted trajectories, so by default a correct answer
    without a tool call is dropped too; RFT (`beacon train rft`) keeps it (`require_tool=False`).
    """
    record = done.record
    if record.get("error"):
        return "failed"
    if not record["correct"]:
        return "wrong_answer"
    if require_tool and not done.trajectory.used_tool:
        return "no_tool_call"
    return None


def run_trajectories(run_dir: Path) -> Iterator[RunTrajectory]:
    """The episodes of an eval run folder, each with its samples.jsonl record, in item order
    (benchmark, sample id, mode, repeat).

    Not in the order they were written: that is the order episodes finished in, which changes
    from run to run with concurrency, and a training set built from a run must be the same on
    every rerun (its trainer shuffles rows by position: the demo's SFT set in finishing order
    gave a different cold-start model each time).
    """
    by_key = {r["key"]: r for r in read_jsonl(run_dir / SAMPLES_FILE)}
    found = [
        (record, line["trajectory"])
        for line in read_jsonl(run_dir / TRAJECTORIES_FILE)
        if (record := by_key.get(line["key"])) is not None
    ]
    found.sort(key=lambda pair: item_order(pair[0]))
    for record, trajectory in found:
        yield RunTrajectory(record, Trajectory.from_dict(trajectory))


def item_order(record: dict[str, Any]) -> tuple:
    """Sort key of an eval record: benchmark, sample id (numbers as numbers), mode, repeat."""
    sample_id, k = str(record.get("sample_id", "")), str(record.get("k", 0))
    number = (0, int(sample_id), "") if sample_id.isdigit() else (1, 0, sample_id)
    mode = str(record.get("mode", ""))
    return (str(record.get("benchmark", "")), number, mode, int(k) if k.isdigit() else 0)


def mix_text_only(cfg: DataConfig, n_expert: int) -> list[RunTrajectory]:
    """Correct text-only base trajectories, one per item, so they make up `mix.text_share`.

    n_text = round(share / (1 - share) * n_expert), capped by what the difficulty run has.
    """
    share = cfg.mix.text_share
    if share == 0 or n_expert == 0:
        return []
    pool: dict[str, RunTrajectory] = {}
    for done in run_trajectories(cfg.root / "difficulty" / "run"):
        r = done.record
        if r["correct"] and not done.trajectory.used_tool and not r.get("error"):
            pool.setdefault(f"{r['benchmark']}/{r['sample_id']}", done)
    wanted = round(share / (1 - share) * n_expert)
    keys = sorted(pool)
    random.Random(cfg.mix.seed).shuffle(keys)
    return [tag(pool[k], "base_text") for k in keys[:wanted]]


def tag(done: RunTrajectory, source: str) -> RunTrajectory:
    """Record where a trajectory came from in its metadata (the SFT set mixes sources)."""
    done.trajectory.metadata = {
        **done.trajectory.metadata,
        "source": source,
        "benchmark": done.record["benchmark"],
        "eval_key": done.record["key"],
    }
    return done


def build_sft_set(cfg: DataConfig, expert: list[RunTrajectory], text: list[RunTrajectory]) -> int:
    """Write sft/trajectories.jsonl and copy the images it references into sft/images."""
    folder = cfg.root / "sft"
    store = ImageStore(folder / "images")
    rows = []
    sources = [(cfg.root / "expert" / "run", expert), (cfg.root / "difficulty" / "run", text)]
    for run_dir, done_list in sources:
        run_store = ImageStore(run_dir / "images")
        for done in done_list:
            copy_images(run_store, store, done.trajectory)
            rows.append(done.trajectory.to_json())
    return write_jsonl_atomic(folder / SFT_FILE, rows)


def image_keys(traj: Trajectory) -> list[str]:
    keys = [k for s in traj.segments for k in s.images]
    if traj.original_prompt is not None:
        keys += traj.original_prompt.images
    return keys


def copy_images(src: ImageStore, dst: ImageStore, traj: Trajectory) -> None:
    """Every image `traj` references (`image_keys`), from the run's store into `dst`."""
    for key in image_keys(traj):
        copy_image(src, dst, key)


def copy_image(src: ImageStore, dst: ImageStore, key: str) -> None:
    target = dst.path(key)
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    shutil.copyfile(src.path(key), tmp)
    tmp.replace(target)
