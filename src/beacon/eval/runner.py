"""`beacon eval`: run every benchmark item in each mode, K samples each, resumably.

The run folder holds `config.yaml` (resolved), `trajectories.jsonl` and `samples.jsonl` (one
line per item x mode x sample, appended as episodes finish), `images/` (the content-addressed
image store) and `summary.json`; `beacon eval` adds `report.md` (`beacon.report.eval_runs`,
with `report: true`). Rerunning into the same folder resumes: finished
samples are skipped, a torn last line is cut, nothing is duplicated or dropped.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from beacon.agent.episode import EpisodeSpec
from beacon.agent.formats import get_format
from beacon.agent.gate import ToolGate
from beacon.agent.loop import AgentLoop
from beacon.benchmarks import Benchmark, get_benchmark
from beacon.engines import Engine, build_engine, load_engine
from beacon.engines.registry import check_api_key, check_model, key_from_env
from beacon.errors import UserError
from beacon.eval.config import EvalConfig, JudgeConfig
from beacon.eval.records import (
    ERRORS_FILE,
    SAMPLES_FILE,
    TRAJECTORIES_FILE,
    InfraError,
    SampleRecord,
    TrajectoryRef,
    prepare_resume,
    read_samples,
)
from beacon.images import ImageStore
from beacon.jsonl import JsonlWriter
from beacon.metrics import summarize
from beacon.metrics.summary import Summary
from beacon.progress import Progress
from beacon.rollout import RETRIED, episode_spec, sample_key, score
from beacon.runfolder import check_run_folder, write_summary
from beacon.sandbox import Sandbox
from beacon.types import Trajectory
from beacon.verify import Judge, Verdict

logger = logging.getLogger(__name__)

_LOGGED_FAILURES = 5  # infrastructure failures logged one by one; the rest are counted


class InfrastructureErrors(RuntimeError):
    """Episodes failed on the engine or sandbox; they are not results and a rerun retries them."""

    def __init__(self, count: int, first_error: str | None, out: Path) -> None:
        self.count = count
        super().__init__(
            f"{count} episode{'s' * (count != 1)} failed on the engine or sandbox, not the "
            f"model (first: {first_error}); they are not counted in any metric. Fix the cause "
            f"(is the server up?) and rerun the same command to retry them; details in "
            f"{out / ERRORS_FILE}"
        )


@dataclass
class WorkItem:
    """One episode to run, with everything needed to score and record it."""

    key: str
    bench: Benchmark
    spec: EpisodeSpec


@dataclass
class InfraCount:
    """Episodes of this invocation that failed on the engine or sandbox (`rollout.RETRIED`)."""

    count: int = 0
    first: str | None = None


@dataclass
class LiveAccuracy:
    """Running accuracy per mode, for the progress bar."""

    correct: dict[str, int] = field(default_factory=dict)
    total: dict[str, int] = field(default_factory=dict)

    def add(self, mode: str, correct: bool) -> None:
        self.correct[mode] = self.correct.get(mode, 0) + int(correct)
        self.total[mode] = self.total.get(mode, 0) + 1

    def postfix(self) -> dict[str, str]:
        return {m: f"{self.correct[m] / self.total[m]:.3f}" for m in sorted(self.total)}


def work_items(cfg: EvalConfig, done: set[str]) -> Iterator[WorkItem]:
    """Episodes still to run, item by item (all modes and samples of an item together).

    With `ids`, a benchmark is read only until its last wanted item: a generated benchmark
    renders no item past it (the demo's expert run asked for 200 hinted items under a limit of
    4,000 and rendered all 4,000: about a minute of CPU).
    """
    for name in cfg.benchmarks:
        bench = get_benchmark(name)
        wanted = None if cfg.ids is None else set(cfg.ids.get(name, ()))
        if wanted is not None and not wanted:
            continue
        for sample in bench.load(path=cfg.data.get(name), limit=cfg.limit, seed=cfg.seed):
            if wanted is not None:
                if sample.id not in wanted:
                    continue
                wanted.discard(sample.id)
            for mode in cfg.modes:
                for k in range(cfg.samples):
                    key = sample_key(bench.name, sample.id, mode, k)
                    if key not in done:
                        yield WorkItem(key, bench, episode_spec(bench, sample, mode, k, cfg.seed))
            if wanted is not None and not wanted:
                break


def make_record(item: WorkItem, trajectory: Trajectory, verdict: Verdict) -> SampleRecord:
    """One samples.jsonl line (`SampleRecord`; the schema is documented in docs/eval.md)."""
    sample = item.spec.sample
    return {
        "key": item.key,
        "benchmark": item.bench.name,
        "sample_id": sample.id,
        "mode": item.spec.mode,
        "k": item.spec.k,
        "category": sample.category,
        "difficulty": sample.metadata.get("difficulty"),
        "meta": item.bench.record_meta(sample),
        "correct": bool(verdict.correct),
        "score": float(verdict.score),
        "parsed": bool(verdict.parsed),
        "prediction": verdict.prediction,
        "answer": sample.answer,
        "verdict_source": verdict.source,
        "used_tool": trajectory.used_tool,
        "tool_calls": trajectory.num_tool_calls,
        "attempted_tool_calls": trajectory.attempted_tool_calls,
        "response_tokens": trajectory.response_tokens,
        "code_tokens": trajectory.code_tokens,
        "finish_reason": trajectory.finish_reason,
        "error": trajectory.error,
        "wall_time_s": round(trajectory.wall_time_s, 4),
        "gate_p_tool": None if trajectory.gate is None else trajectory.gate.p_tool,
        "gate_path": None if trajectory.gate is None else trajectory.gate.path,
        "trajectory": TrajectoryRef(file=TRAJECTORIES_FILE, key=item.key),
    }


def preflight(cfg: EvalConfig, api_key: str | None = None) -> None:
    """The checks that need no model: benchmark names and local data paths, before any folder
    is made, so a refused command leaves nothing behind."""
    check_model(cfg.engine)
    check_api_key(cfg.engine, api_key)
    if "gated" in cfg.modes and cfg.agent.gate.engine is not None:
        check_model(cfg.agent.gate.engine)
    for name in cfg.benchmarks:
        try:
            get_benchmark(name)
        except KeyError as exc:
            raise UserError(f"benchmarks: {exc.args[0] if exc.args else name}") from None
    for name, path in cfg.data.items():
        if name not in cfg.benchmarks:
            raise UserError(
                f"data.{name} is set but {name!r} is not among benchmarks {cfg.benchmarks}; "
                f"add it with --bench or drop --data {name}=..."
            )
        if not Path(path).exists():
            raise UserError(
                f"data.{name}={path}: no such file or folder; give the path of a local copy, "
                f"or leave --data {name}=... out to load it from the hub"
            )


def run_eval(cfg: EvalConfig, progress: bool = True, api_key: str | None = None) -> Summary:
    """Run (or resume) an evaluation; return the summary that is also in summary.json.

    `api_key` is the engine server's key from `--api-key` (else the variable
    `engine.api_key_env` names); it is used, never stored.
    """
    out = Path(cfg.out)
    preflight(cfg, api_key)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"out={out}: cannot create the run folder ({exc.strerror or exc}); "
            "choose a writable folder with --out"
        ) from None
    check_run_folder(out, cfg, EvalConfig.OPERATIONAL_KEYS, folder_setting="--out")
    done = prepare_resume(out)
    if done:
        logger.info("resuming %s: %d samples already done", out, len(done))
    items = work_items(cfg, set(done))
    first = next(items, None)
    failures = InfraCount()
    if first is not None:
        failures = _run_items(cfg, out, _chain(first, items), len(done), progress, api_key)
    summary = finish_run(cfg, out)
    if failures.count:
        raise InfrastructureErrors(failures.count, failures.first, out)
    return summary


def _chain(first: WorkItem, rest: Iterator[WorkItem]) -> Iterator[WorkItem]:
    yield first
    yield from rest


def _run_items(
    cfg: EvalConfig,
    out: Path,
    items: Iterator[WorkItem],
    already: int,
    progress: bool,
    api_key: str | None,
) -> InfraCount:
    by_spec: dict[int, WorkItem] = {}

    def specs() -> Iterator[EpisodeSpec]:
        for item in items:
            by_spec[id(item.spec)] = item
            yield item.spec

    with ExitStack() as stack:
        engine = build_engine(cfg.engine, api_key)
        stack.callback(engine.close)
        gate = _build_gate(cfg, engine, stack) if "gated" in cfg.modes else None
        sandbox = None
        if any(mode != "notool" for mode in cfg.modes):
            sandbox = stack.enter_context(Sandbox(cfg.sandbox))
        loop = stack.enter_context(
            AgentLoop(engine, sandbox, cfg.agent, store=ImageStore(out / "images"), gate=gate)
        )
        total = _expected_total(cfg)
        bar = Progress(
            "eval",
            total=None if total is None else max(0, total - already),
            unit="ep",
            enabled=progress,
        )
        stack.callback(bar.close)
        recorder = stack.enter_context(Recorder(out, _build_judge(cfg, out), bar, cfg.judge))
        for spec, trajectory in loop.stream(specs(), max_active=cfg.concurrency):
            recorder.submit(by_spec.pop(id(spec)), trajectory)
    return recorder.failures


def _build_gate(cfg: EvalConfig, policy: Engine, stack: ExitStack) -> ToolGate:
    """The gated mode's gate: the policy scores p_tool, or the `agent.gate.engine` model."""
    gate_cfg, fmt = cfg.agent.gate, get_format(cfg.agent.format)
    if gate_cfg.engine is None:
        return ToolGate(policy, fmt, gate_cfg.threshold)
    scorer = build_engine(gate_cfg.engine)
    stack.callback(scorer.close)
    return ToolGate(scorer, fmt, gate_cfg.threshold, scorer=gate_cfg.engine.model)


class Recorder:
    """Scores finished episodes and appends them to the run folder, off the loop's thread.

    Rule scoring takes microseconds, but a judge call is an HTTP round trip; scoring in worker
    threads keeps generation going meanwhile. A failure to write (disk full) is raised at the
    next submit or on exit, so the run stops instead of silently losing samples.
    """

    def __init__(
        self, out: Path, judge: Judge | None, bar: Progress, judge_cfg: JudgeConfig
    ) -> None:
        self.judge, self.bar = judge, bar
        self.samples = JsonlWriter(out / SAMPLES_FILE)
        self.trajectories = JsonlWriter(out / TRAJECTORIES_FILE)
        self.errors = JsonlWriter(out / ERRORS_FILE)
        self.failures = InfraCount()
        workers = judge_cfg.concurrency if judge is not None else 1
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="beacon-score")
        self.pending: list[Future] = []
        self.live = LiveAccuracy()
        self.lock = threading.Lock()

    def submit(self, item: WorkItem, trajectory: Trajectory) -> None:
        self._raise_failures()
        self.pending.append(self.pool.submit(self._record, item, trajectory))

    def _record(self, item: WorkItem, trajectory: Trajectory) -> None:
        if trajectory.finish_reason in RETRIED:
            self._record_failure(item, trajectory)
            return
        verdict = score(item.bench, trajectory, item.spec.sample, self.judge)
        line = '{"key":' + json.dumps(item.key) + ',"trajectory":' + trajectory.to_json() + "}"
        self.trajectories.write(line)
        self.samples.write(make_record(item, trajectory, verdict))
        with self.lock:
            self.live.add(item.spec.mode, verdict.correct)
            self.bar.update(1)
            self.bar.set_postfix(self.live.postfix())

    def _record_failure(self, item: WorkItem, trajectory: Trajectory) -> None:
        """Not a result: logged and kept out of samples.jsonl, so a rerun retries it."""
        failure = InfraError(
            key=item.key, finish_reason=trajectory.finish_reason, error=trajectory.error
        )
        self.errors.write(dict(failure))
        with self.lock:
            self.failures.count += 1
            self.failures.first = self.failures.first or trajectory.error
            if self.failures.count <= _LOGGED_FAILURES:
                logger.error(
                    "%s: %s (%s); not a result, it will be retried",
                    item.key,
                    trajectory.finish_reason,
                    trajectory.error,
                )
            self.bar.update(1)
            self.bar.set_postfix({**self.live.postfix(), "failed": self.failures.count})

    def _raise_failures(self) -> None:
        still = []
        for future in self.pending:
            if future.done():
                future.result()
            else:
                still.append(future)
        self.pending = still

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.shutdown(wait=True)
        self.samples.close()
        self.trajectories.close()
        self.errors.close()
        if exc[0] is None:
            self._raise_failures()


def _expected_total(cfg: EvalConfig) -> int | None:
    if cfg.ids is not None:
        return sum(len(set(v)) for v in cfg.ids.values()) * len(cfg.modes) * cfg.samples
    if cfg.limit is None:
        return None
    return cfg.limit * len(cfg.benchmarks) * len(cfg.modes) * cfg.samples


def _build_judge(cfg: EvalConfig, out: Path) -> Judge | None:
    if cfg.judge.model is None:
        return None
    engine = load_engine(
        "openai",
        cfg.judge.model,
        base_url=cfg.judge.base_url,
        api_key=key_from_env(cfg.judge.api_key_env),
        vllm_extensions=cfg.judge.vllm_extensions,
    )
    return Judge(
        engine,
        model_name=cfg.judge.model,
        cache_dir=out / "judge_cache",
        prompt_version=cfg.judge.prompt_version,
    )


def finish_run(cfg: EvalConfig, out: Path) -> Summary:
    """Summarize samples.jsonl into summary.json (`beacon eval` then writes report.md)."""
    records = read_samples(out / SAMPLES_FILE)
    aggregators = {name: get_benchmark(name).aggregate for name in cfg.benchmarks}
    summary = summarize(records, bootstrap=cfg.bootstrap, seed=cfg.seed, aggregators=aggregators)
    write_summary(out, summary)
    return summary
