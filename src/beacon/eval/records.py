"""The run folder's records: the typed samples.jsonl record, and JSONL files that survive `kill -9`.

A record is committed when its line, newline included, is flushed and fsynced. The trajectory of a
sample is written before its record: a trajectory without a record (killed in between) is dropped
at resume and redone with its sample.

Reading and writing follow `beacon.jsonl` (its one policy for a bad line).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, TypedDict

from beacon.jsonl import CorruptJsonl, read_jsonl, repair_jsonl

logger = logging.getLogger(__name__)

SAMPLES_FILE = "samples.jsonl"
TRAJECTORIES_FILE = "trajectories.jsonl"
ERRORS_FILE = "errors.jsonl"


class InfraError(TypedDict):
    """One errors.jsonl line: an episode that failed outside the model, to be retried."""

    key: str
    finish_reason: str
    error: str | None


class TrajectoryRef(TypedDict):
    """Where a sample's full trajectory is: the file in the run folder and its key there."""

    file: str
    key: str


class SampleRecord(TypedDict):
    """One samples.jsonl line: one item x mode x sample (docs/eval.md, "samples.jsonl").

    A dict at run time, so metrics and benchmark aggregators read it as a Mapping; the type names
    every field a producer must write and a reader may rely on.
    """

    key: str  # "benchmark/sample_id/mode/k", unique in a run
    benchmark: str
    sample_id: str
    mode: str  # tool | notool | gated
    k: int  # sample index, 0..samples-1
    category: str | None
    difficulty: str | None  # the benchmark's own difficulty label, if any
    meta: dict[str, Any]  # benchmark-specific fields its aggregator reads
    correct: bool
    score: float
    parsed: bool  # an answer could be extracted
    prediction: str | None
    answer: str
    verdict_source: str  # which rule (or the judge) decided
    used_tool: bool  # at least one executed tool call
    tool_calls: int
    attempted_tool_calls: int
    response_tokens: int
    code_tokens: int
    finish_reason: str
    error: str | None
    wall_time_s: float  # the episode's wall time, the gate's scoring included
    gate_p_tool: float | None  # gated mode: the gate's p_tool (beacon.agent.gate); else None
    gate_path: str | None  # gated mode: the path taken, tool | notool; else None
    trajectory: TrajectoryRef


def read_samples(path: Path) -> list[SampleRecord]:
    """The records of a ``samples.jsonl`` (the module's policy for bad lines applies)."""
    return list(read_jsonl(path))  # type: ignore[arg-type]


def prepare_resume(run_dir: Path) -> dict[str, SampleRecord]:
    """Make the run folder consistent after a crash; return the committed records by key.

    Torn lines are cut from both files; trajectories whose sample record never landed are
    removed (their samples run again).
    """
    samples, trajectories = run_dir / SAMPLES_FILE, run_dir / TRAJECTORIES_FILE
    repair_jsonl(samples)
    repair_jsonl(trajectories)
    done = {record["key"]: record for record in read_samples(samples)}
    _drop_orphan_trajectories(trajectories, set(done))
    return done


def _drop_orphan_trajectories(path: Path, keep: set[str]) -> None:
    if not path.exists():
        return
    orphans = 0
    tmp = path.with_suffix(".jsonl.tmp")
    seen: set[str] = set()
    with path.open("rb") as src, tmp.open("wb") as dst:
        for number, raw in enumerate(src, start=1):
            key = _parse_line(path, number, raw).get("key")
            if key in keep and key not in seen:
                seen.add(key)
                dst.write(raw)
            else:
                orphans += 1
    if orphans:
        os.replace(tmp, path)
        logger.info("dropped %d trajectories of unfinished samples from %s", orphans, path)
    else:
        tmp.unlink()


def _parse_line(path: Path, number: int, raw: bytes) -> dict[str, Any]:
    """One line of a repaired file (its torn tail already cut), so a bad line is corruption."""
    try:
        return json.loads(raw)
    except ValueError:
        raise CorruptJsonl(
            f"{path}:{number} is not valid JSON, and only the last line may be torn by a killed "
            "run. Delete or repair that line, then rerun."
        ) from None
