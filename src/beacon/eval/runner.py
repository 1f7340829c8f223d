"""`beacon eval`: run every benchmark item in each mode, K samples each, resumably.

The run folder holds `config.yaml` (resolved), `trajectories.jsonl` and `samples.jsonl` (one
line per item x mode x sample, appended as episodes finish), `images/` (the content-addressed
image store), `summary.json` and `report.md`. Rerunning into the same folder resumes: finished
samples are skipped, a torn last line is cut, nothing is duplicated or dropped.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import zlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from beacon.agent.episode import EpisodeSpec
from beacon.agent.loop import AgentLoop
from beacon.benchmarks import Benchmark, get_benchmark
from beacon.config import to_dict, to_yaml
from beacon.engines import load_engine
from beacon.eval.config import TINY_MODEL, EngineConfig, EvalConfig
from beacon.eval.records import (
    SAMPLES_FILE,
    TRAJECTORIES_FILE,
    JsonlWriter,
    prepare_resume,
    read_jsonl,
)
from beacon.images import ImageStore
from beacon.types import Sample, Trajectory

logger = logging.getLogger(__name__)

# Settings that change what a sample's result means; a run folder refuses to mix them.
IDENTITY_KEYS = ("engine.model", "agent", "seed")


class RunFolderMismatch(ValueError):
    """The run folder holds results made with different settings."""


@dataclass
class WorkItem:
    """One episode to run, with everything needed to score and record it."""

    key: str
    bench: Benchmark
    spec: EpisodeSpec


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


def sample_key(benchmark: str, sample_id: str, mode: str, k: int) -> str:
    return f"{benchmark}/{sample_id}/{mode}/{k}"


def episode_seed(base: int, key: str) -> int:
    """A per-episode seed that does not depend on order, so a resumed run samples the same."""
    return (base * 1_000_003 + zlib.crc32(key.encode())) % (2**31)


def work_items(cfg: EvalConfig, done: set[str]) -> Iterator[WorkItem]:
    """Episodes still to run, item by item (all modes and samples of an item together)."""
    for name in cfg.benchmarks:
        bench = get_benchmark(name)
        wanted = None if cfg.ids is None else set(cfg.ids.get(name, ()))
        for sample in bench.load(path=cfg.data.get(name), limit=cfg.limit, seed=cfg.seed):
            if wanted is not None and sample.id not in wanted:
                continue
            question = bench.prompt(sample)
            for mode in cfg.modes:
                for k in range(cfg.samples):
                    key = sample_key(name, sample.id, mode, k)
                    if key in done:
                        continue
                    seed = episode_seed(cfg.seed, key)
                    spec = EpisodeSpec(sample, mode=mode, k=k, question=question, seed=seed)
                    yield WorkItem(key, bench, spec)


def make_record(item: WorkItem, trajectory: Trajectory, verdict: Any) -> dict[str, Any]:
    """One samples.jsonl line (the schema is documented in docs/eval.md)."""
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
        "trajectory": {"file": TRAJECTORIES_FILE, "key": item.key},
    }


def check_run_folder(out: Path, cfg: EvalConfig) -> None:
    """Write config.yaml, or check that the folder's earlier run used the same settings."""
    path = out / "config.yaml"
    resolved = to_yaml(cfg)
    if not path.exists():
        path.write_text(resolved)
        return
    import yaml

    before, now = _flatten(yaml.safe_load(path.read_text()) or {}), _flatten(to_dict(cfg))
    changed = [  # settings an older version did not have are not a change
        k for k in sorted(before) if k.startswith(IDENTITY_KEYS) and before[k] != now.get(k)
    ]
    if changed:
        details = ", ".join(f"{k}: {before.get(k)!r} -> {now.get(k)!r}" for k in changed)
        raise RunFolderMismatch(
            f"{out} holds results made with other settings ({details}); resuming would mix "
            "them. Use a new --out folder, or restore those settings."
        )
    path.write_text(resolved)


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def run_eval(cfg: EvalConfig, progress: bool = True) -> dict[str, Any]:
    """Run (or resume) an evaluation; return the summary that is also in summary.json."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in cfg.benchmarks:
        get_benchmark(name)  # unknown names fail here, before any model loads
    check_run_folder(out, cfg)
    done = prepare_resume(out)
    if done:
        logger.info("resuming %s: %d samples already done", out, len(done))
    items = work_items(cfg, set(done))
    first = next(items, None)
    if first is not None:
        _run_items(cfg, out, _chain(first, items), len(done), progress)
    return finish_run(cfg, out)


def _chain(first: WorkItem, rest: Iterator[WorkItem]) -> Iterator[WorkItem]:
    yield first
    yield from rest


def _run_items(
    cfg: EvalConfig, out: Path, items: Iterator[WorkItem], already: int, progress: bool
) -> None:
    by_spec: dict[int, WorkItem] = {}

    def specs() -> Iterator[EpisodeSpec]:
        for item in items:
            by_spec[id(item.spec)] = item
            yield item.spec

    with ExitStack() as stack:
        engine = build_engine(cfg.engine)
        stack.callback(engine.close)
        sandbox = None
        if "tool" in cfg.modes:
            from beacon.sandbox import Sandbox

            sandbox = stack.enter_context(Sandbox(cfg.sandbox))
        loop = stack.enter_context(
            AgentLoop(engine, sandbox, cfg.agent, store=ImageStore(out / "images"))
        )
        total = _expected_total(cfg)
        bar = tqdm(
            total=None if total is None else max(0, total - already),
            desc="eval",
            unit="ep",
            disable=not progress,
            dynamic_ncols=True,
        )
        stack.callback(bar.close)
        recorder = stack.enter_context(Recorder(out, _build_judge(cfg, out), bar, cfg.judge))
        for spec, trajectory in loop.stream(specs(), max_active=cfg.concurrency):
            recorder.submit(by_spec.pop(id(spec)), trajectory)


class Recorder:
    """Scores finished episodes and appends them to the run folder, off the loop's thread.

    Rule scoring takes microseconds, but a judge call is an HTTP round trip; scoring in worker
    threads keeps generation going meanwhile. A failure to write (disk full) is raised at the
    next submit or on exit, so the run stops instead of silently losing samples.
    """

    def __init__(self, out: Path, judge: Any, bar: Any, judge_cfg: Any) -> None:
        self.judge, self.bar = judge, bar
        self.samples = JsonlWriter(out / SAMPLES_FILE)
        self.trajectories = JsonlWriter(out / TRAJECTORIES_FILE)
        workers = judge_cfg.concurrency if judge is not None else 1
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="beacon-score")
        self.pending: list[Future] = []
        self.live = LiveAccuracy()
        self.lock = threading.Lock()

    def submit(self, item: WorkItem, trajectory: Trajectory) -> None:
        self._raise_failures()
        self.pending.append(self.pool.submit(self._record, item, trajectory))

    def _record(self, item: WorkItem, trajectory: Trajectory) -> None:
        verdict = score(item.bench, trajectory, item.spec.sample, self.judge)
        line = '{"key":' + json.dumps(item.key) + ',"trajectory":' + trajectory.to_json() + "}"
        self.trajectories.write(line)
        self.samples.write(make_record(item, trajectory, verdict))
        with self.lock:
            self.live.add(item.spec.mode, verdict.correct)
            self.bar.update(1)
            self.bar.set_postfix(self.live.postfix(), refresh=False)

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
        if exc[0] is None:
            self._raise_failures()


def score(bench: Benchmark, trajectory: Trajectory, sample: Sample, judge: Any) -> Any:
    """The benchmark's verdict on what the model wrote (observations are not its words)."""
    return bench.score(trajectory.generated_text, sample, judge=judge)


def build_engine(cfg: EngineConfig) -> Any:
    """The configured engine; model "tiny" is the built-in tiny Qwen2-VL (built on first use)."""
    model = cfg.model
    if model == TINY_MODEL:
        from beacon.engines.tiny import cached_tiny_model

        model = str(cached_tiny_model("qwen2_vl"))
    if cfg.name == "openai":
        from beacon.engines.tokenizer import HFTokenizer

        tokenizer = HFTokenizer.from_pretrained(cfg.tokenizer) if cfg.tokenizer else None
        return load_engine(
            "openai",
            model,
            base_url=cfg.base_url,
            api_key=cfg.api_key,
            tokenizer=tokenizer,
            concurrency=cfg.concurrency,
            timeout_s=cfg.timeout_s,
            max_retries=cfg.max_retries,
        )
    if cfg.name == "vllm":
        return load_engine("vllm", model)
    return load_engine("hf", model, device=_device(cfg.device), batch_size=cfg.batch_size)


def _device(name: str) -> str:
    """ "auto" picks the GPU when there is one."""
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _expected_total(cfg: EvalConfig) -> int | None:
    if cfg.ids is not None:
        return sum(len(set(v)) for v in cfg.ids.values()) * len(cfg.modes) * cfg.samples
    if cfg.limit is None:
        return None
    return cfg.limit * len(cfg.benchmarks) * len(cfg.modes) * cfg.samples


def _build_judge(cfg: EvalConfig, out: Path) -> Any:
    if cfg.judge.model is None:
        return None
    from beacon.engines.openai import OpenAIEngine
    from beacon.verify import Judge

    engine = OpenAIEngine(
        base_url=cfg.judge.base_url, model=cfg.judge.model, api_key=cfg.judge.api_key
    )
    return Judge(
        engine,
        model_name=cfg.judge.model,
        cache_dir=out / "judge_cache",
        prompt_version=cfg.judge.prompt_version,
    )


def finish_run(cfg: EvalConfig, out: Path) -> dict[str, Any]:
    """Summarize samples.jsonl into summary.json (and report.md when asked)."""
    from beacon.metrics import summarize

    records = list(read_jsonl(out / SAMPLES_FILE))
    aggregators = {name: get_benchmark(name).aggregate for name in cfg.benchmarks}
    summary = summarize(records, bootstrap=cfg.bootstrap, seed=cfg.seed, aggregators=aggregators)
    (out / "summary.json").write_text(json.dumps(_json_safe(summary), indent=2) + "\n")
    if cfg.report:
        from beacon.eval.report import load_run, render_report

        render_report([load_run(out, aggregators=aggregators, summary=summary)], out)
    return summary


def _json_safe(value: Any) -> Any:
    """NaN (an undefined metric) becomes null, as JSON has no NaN."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value
