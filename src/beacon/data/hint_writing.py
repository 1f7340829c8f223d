"""The `hints` stage: answer-free hints (HGCE, beacon.md §4 step 2) from verified expert
trajectories, written by the expert and checked by `beacon.train.grpo.hints.leak_reasons`.

For each verified trajectory the expert sees the image, the question and its own solution, and
is asked for sub-goals, the region to inspect and the operation to use, never the answer. A hint
that leaks (answer text, option letter or text, any number of the answer) is rejected and asked
for again, up to `hints.max_attempts`; the first attempt is greedy, retries sample at
`hints.temperature`. Every item's outcome, accepted or not, is one line of `hints/hints.jsonl`,
appended as it is decided, so a rerun skips decided items (the cache) and a killed run loses at
most the requests in flight.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from beacon.data.config import DataConfig
from beacon.data.eval_stages import VERIFIED_FILE
from beacon.data.pool import load_samples
from beacon.data.records import StageSummary
from beacon.engines.base import GenerationRequest, SamplingParams
from beacon.eval.runner import build_engine
from beacon.images import load_image
from beacon.jsonl import JsonlWriter, read_jsonl, repair_jsonl
from beacon.progress import Progress
from beacon.train.grpo.hints import leak_reasons
from beacon.types import Sample, Trajectory

logger = logging.getLogger(__name__)

HINTS_FILE = "hints.jsonl"
HINT_TASK = "Write an answer-free hint"
HINT_SYSTEM = (
    f"{HINT_TASK} for a visual question. You are given the image, the question and a verified "
    "solution. The hint helps a student solve the question on their own: name the sub-goals, "
    "the region of the image to inspect, and the operation to use (crop, zoom, enhance, "
    "count, measure). Never state or imply the answer: no answer value, no number of the "
    "answer, no option letter or option text. Reply with the hint only, in at most three "
    "sentences."
)


@dataclass
class HintRecord:
    """One item's hint decision: one line of hints.jsonl."""

    benchmark: str
    sample_id: str
    hint: str | None
    accepted: bool
    attempts: int
    rejected: list[dict[str, Any]] = field(default_factory=list)  # {"hint", "reasons"}
    error: str | None = None

    @property
    def key(self) -> str:
        """`benchmark/sample_id`: the key hints are joined to items by (and resumed by)."""
        return f"{self.benchmark}/{self.sample_id}"


def hint_request(
    sample: Sample, image: Any, trajectory: Trajectory, attempt: int, cfg: DataConfig
) -> GenerationRequest:
    """The expert request for one hint; attempt 0 is greedy."""
    text = (
        f"Question: {sample.question}\n\nVerified solution (code outputs in <sandbox_output>):\n"
        f"{trajectory.response_text.strip()}\n\nNow write the hint."
    )
    messages = [
        {"role": "system", "content": HINT_SYSTEM},
        {
            "role": "user",
            "content": [{"type": "image", "image": image}, {"type": "text", "text": text}],
        },
    ]
    temperature = 0.0 if attempt == 0 else cfg.hints.temperature
    sampling = SamplingParams(
        temperature=temperature, max_new_tokens=cfg.hints.max_tokens, seed=attempt
    )
    return GenerationRequest(messages=messages, sampling=sampling)


def clean_hint(text: str) -> str:
    """The hint without a leading "Hint:" label or surrounding whitespace."""
    text = text.strip()
    if text.lower().startswith("hint:"):
        text = text[5:].strip()
    return text


def judge_hint(text: str, sample: Sample) -> list[str]:
    """Why `text` cannot be a hint for `sample` (empty: accept it)."""
    if not text:
        return ["empty hint"]
    return leak_reasons(text, sample.answer, sample.options)


def run_hints(cfg: DataConfig, progress: bool = True) -> StageSummary:
    """Write (or resume) hints/hints.jsonl for every verified expert trajectory."""
    folder = cfg.root / "hints"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / HINTS_FILE
    repair_jsonl(path)
    decided = {f"{r['benchmark']}/{r['sample_id']}" for r in read_jsonl(path)}
    todo = [t for t in verified_trajectories(cfg) if _traj_key(t) not in decided]
    if decided:
        logger.info("hints: %d items already decided in %s", len(decided), path)
    samples = load_samples(cfg, todo)
    engine = _expert_engine(cfg)
    writer = JsonlWriter(path)
    bar = Progress("hints", total=len(todo), unit="item", enabled=progress)
    try:
        for chunk in _chunks(todo, cfg.expert.concurrency):
            for record in decide_chunk(engine, chunk, samples, cfg):
                writer.write(asdict(record))
                bar.update(1)
    finally:
        bar.close()
        writer.close()
        engine.close()
    summary = summarize_hints(path)
    summary.write(folder)
    logger.info("%s", summary.line())
    return summary


def decide_chunk(
    engine: Any, chunk: list[Trajectory], samples: dict[str, Sample], cfg: DataConfig
) -> list[HintRecord]:
    """Ask for hints for one chunk of items at once; retry the rejected ones."""
    records = {}
    open_items = list(chunk)
    images = {_traj_key(t): load_image(samples[_traj_key(t)].images[0]) for t in chunk}
    for attempt in range(cfg.hints.max_attempts):
        if not open_items:
            break
        requests = [
            hint_request(samples[_traj_key(t)], images[_traj_key(t)], t, attempt, cfg)
            for t in open_items
        ]
        still_open = []
        for traj, result in zip(open_items, engine.generate(requests), strict=True):
            key = _traj_key(traj)
            sample = samples[key]
            record = records.setdefault(
                key,
                HintRecord(
                    benchmark=traj.metadata["benchmark"],
                    sample_id=sample.id,
                    hint=None,
                    accepted=False,
                    attempts=0,
                ),
            )
            record.attempts = attempt + 1
            if result.finish_reason == "error":
                record.error = result.error
                still_open.append(traj)
                continue
            hint = clean_hint(result.text)
            reasons = judge_hint(hint, sample)
            if reasons:
                record.rejected.append({"hint": hint, "reasons": reasons})
                still_open.append(traj)
            else:
                record.hint, record.accepted, record.error = hint, True, None
        open_items = still_open
    return [records[_traj_key(t)] for t in chunk]


def summarize_hints(path: Path) -> StageSummary:
    """Counts over hints.jsonl: accepted, and dropped as leaking, empty or failed."""
    summary = StageSummary(stage="hints")
    for r in read_jsonl(path):
        summary.total += 1
        if r["accepted"]:
            summary.kept += 1
        elif r.get("error") and not r["rejected"]:
            summary.drop("expert_error")
        elif any(reason == "empty hint" for rej in r["rejected"] for reason in rej["reasons"]):
            summary.drop("empty")
        else:
            summary.drop("leaks_answer")
    summary.extra = {
        "rejected_attempts": sum(len(r["rejected"]) for r in read_jsonl(path)),
    }
    return summary


def verified_trajectories(cfg: DataConfig) -> list[Trajectory]:
    """The expert stage's verified trajectories, which hints are written from; raises naming the
    command to run when that stage has not run."""
    path = cfg.root / "expert" / VERIFIED_FILE
    if not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist; run `beacon data expert` with this config first"
        )
    return [Trajectory.from_dict(line) for line in read_jsonl(path)]


def _expert_engine(cfg: DataConfig) -> Any:
    return build_engine(cfg.expert.engine)


def _traj_key(traj: Trajectory) -> str:
    return f"{traj.metadata['benchmark']}/{traj.sample_id}"


def _chunks(items: list[Trajectory], size: int) -> Iterator[list[Trajectory]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
