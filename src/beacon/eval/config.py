"""Settings of `beacon eval`: what to evaluate, on which engine, and how.

Every setting is declared once here, with its default and a one-line comment (the comment is
the documentation `beacon eval --show-config` prints). YAML files set values, `--set a.b=c`
overrides one, and the whole config is validated at once before any model loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from beacon.agent.config import AgentConfig
from beacon.sandbox import SandboxConfig

ENGINES = ("hf", "openai", "vllm")
MODES = ("tool", "notool")  # hinted mode is for HGCE training rollouts, not evaluation
TINY_MODEL = (
    "tiny"  # model name that means "the built-in tiny Qwen2-VL, built locally on first use"
)


@dataclass
class EngineConfig:
    """Which engine generates, and how to reach or load it."""

    name: str = "hf"  # hf (transformers, local), openai (any compatible server), vllm (offline)
    model: str = TINY_MODEL  # local path or hub name; "tiny" builds the built-in tiny model
    base_url: str = "http://127.0.0.1:8000/v1"  # openai engine: the server's /v1 address
    api_key: str | None = None  # openai engine: bearer token (or set OPENAI_API_KEY)
    tokenizer: str | None = None  # openai engine: local processor path for token ids
    device: str = "auto"  # hf/vllm: cpu, cuda or auto
    batch_size: int = 8  # hf: requests per forward batch
    concurrency: int = 16  # openai: requests in flight
    timeout_s: float = 300.0  # openai: per-request timeout
    max_retries: int = 4  # openai: retries on 5xx, 429 and connection errors

    def validate(self) -> list[str]:
        problems = []
        if self.name not in ENGINES:
            problems.append(f"name: unknown engine {self.name!r}; choose one of {list(ENGINES)}")
        if self.batch_size < 1 or self.concurrency < 1:
            problems.append("batch_size and concurrency must be >= 1")
        return problems


@dataclass
class JudgeConfig:
    """Optional LLM judge, asked only when the rules cannot decide."""

    model: str | None = None  # judge model name on the server; null disables the judge
    base_url: str = "http://127.0.0.1:8000/v1"  # the judge server's /v1 address
    api_key: str | None = None  # bearer token for the judge server
    prompt_version: str = "v1"  # cache key part: change it when the judge prompt changes
    concurrency: int = 8  # episodes scored at once (judge calls run while generation goes on)

    def validate(self) -> list[str]:
        if self.concurrency < 1:
            return [f"concurrency: must be >= 1, got {self.concurrency}"]
        return []


@dataclass
class EvalConfig:
    """`beacon eval`: every item of every benchmark, in each mode, K samples each."""

    engine: EngineConfig = field(default_factory=EngineConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    benchmarks: list[str] = field(default_factory=lambda: ["synth"])  # registry names
    data: dict[str, str] = field(default_factory=dict)  # benchmark -> local file/folder
    limit: int | None = None  # items per benchmark (null: all)
    ids: dict[str, list[str]] | None = None  # benchmark -> sample ids to run (null: all loaded)
    modes: list[str] = field(default_factory=lambda: ["tool", "notool"])  # tool and/or notool
    samples: int = 1  # K samples per item and mode (use temperature > 0 when K > 1)
    concurrency: int = 8  # episodes in flight (the engine batches them)
    seed: int = 0  # benchmark shuffling and sampling seed
    out: str = "runs/eval"  # run folder; rerunning into it resumes
    bootstrap: int = 1000  # bootstrap resamples for confidence intervals (0: none)
    report: bool = True  # write report.md and plots at the end

    def validate(self) -> list[str]:
        problems = []
        for mode in self.modes:
            if mode not in MODES:
                problems.append(f"modes: unknown mode {mode!r}; choose from {list(MODES)}")
        if not self.modes:
            problems.append("modes: give at least one mode, e.g. --modes tool,notool")
        if not self.benchmarks:
            problems.append("benchmarks: give at least one benchmark, e.g. --bench synth")
        if self.samples < 1:
            problems.append(f"samples: must be >= 1, got {self.samples}")
        if self.concurrency < 1:
            problems.append(f"concurrency: must be >= 1, got {self.concurrency}")
        if self.samples > 1 and self.agent.temperature == 0:
            problems.append(
                f"samples={self.samples} at agent.temperature=0 gives K identical samples; "
                "set --set agent.temperature=1.0"
            )
        return problems
