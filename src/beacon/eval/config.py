"""Settings of `beacon eval`: what to evaluate, on which engine, and how.

Every setting is declared once here, with its default and a one-line description (the text
`beacon eval --show-config` prints). YAML files set values, `--set a.b=c` overrides one, and the
whole config is validated at once before any model loads.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, get_args

from pydantic import Field, field_validator, model_validator

from beacon.agent.config import AgentConfig
from beacon.config import StrictModel, env_var_name, refuse_secret
from beacon.engines.base import VllmExtensions
from beacon.engines.config import TINY_MODEL, EngineConfig
from beacon.sandbox import SandboxConfig

__all__ = ["MODES", "TINY_MODEL", "EngineConfig", "EvalConfig", "JudgeConfig"]

Mode = Literal["tool", "notool", "gated"]  # hinted mode is for HGCE training rollouts only
MODES: tuple[str, ...] = get_args(Mode)


class JudgeConfig(StrictModel):
    """Optional LLM judge, asked only when the rules cannot decide."""

    model: str | None = Field(
        None, description="judge model name on the server; null disables the judge"
    )
    base_url: str = Field("http://127.0.0.1:8000/v1", description="the judge server's /v1 address")
    api_key_env: str | None = Field(
        "OPENAI_API_KEY",
        description="environment variable holding the judge server's API key (unset or null: "
        "no key)",
    )
    vllm_extensions: VllmExtensions = Field(
        "auto",
        description="send vLLM's extra request fields: on, off (hosted APIs), auto (until a "
        "400 names one)",
    )
    prompt_version: str = Field(
        "v1", description="cache key part: change it when the judge prompt changes"
    )
    concurrency: int = Field(
        8, ge=1, description="episodes scored at once (judge calls overlap generation)"
    )

    _env_name = field_validator("api_key_env")(env_var_name)

    @model_validator(mode="before")
    @classmethod
    def _no_key(cls, data: Any) -> Any:
        return refuse_secret(
            data,
            "export it in the variable judge.api_key_env names (OPENAI_API_KEY by default)",
        )


class EvalConfig(StrictModel):
    """`beacon eval`: every item of every benchmark, in each mode, K samples each."""

    # Settings that change how a run goes, not what its samples mean: a run folder's identity
    # is its whole resolved config minus these (docs/eval.md, "Run identity").
    OPERATIONAL_KEYS: ClassVar[tuple[str, ...]] = (
        "out",
        "concurrency",
        "limit",
        "report",
        "bootstrap",
        "engine.base_url",
        "engine.api_key_env",
        "engine.concurrency",
        "engine.batch_size",
        "engine.timeout_s",
        "engine.max_retries",
        "agent.gate.engine.base_url",
        "agent.gate.engine.api_key_env",
        "agent.gate.engine.concurrency",
        "agent.gate.engine.batch_size",
        "agent.gate.engine.timeout_s",
        "agent.gate.engine.max_retries",
        "judge.base_url",
        "judge.api_key_env",
        "judge.concurrency",
        "sandbox.num_workers",
        "sandbox.root_dir",
        "sandbox.child_uid_base",
        "sandbox.worker_max_rss_mb",
        "sandbox.startup_timeout_s",
        "sandbox.worker_grace_s",
        # keys that once were settings: a folder's config.yaml may hold them (as null), and
        # resuming it rewrites that file without them
        "engine.api_key",
        "agent.gate.engine.api_key",
        "judge.api_key",
    )

    engine: EngineConfig = Field(default_factory=EngineConfig, description="the engine")
    agent: AgentConfig = Field(default_factory=AgentConfig, description="the agent loop")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description="the sandbox")
    judge: JudgeConfig = Field(default_factory=JudgeConfig, description="the LLM judge")
    benchmarks: list[str] = Field(
        default_factory=lambda: ["synth"],
        min_length=1,
        description="registry names (beacon bench list)",
    )
    data: dict[str, str] = Field(default_factory=dict, description="benchmark -> local file/folder")
    limit: int | None = Field(None, description="items per benchmark (null: all)")
    ids: dict[str, list[str]] | None = Field(
        None,
        description="benchmark -> sample ids to run, among its first `limit` items (null: "
        "every loaded item); a benchmark is read only until all its ids are found",
    )
    modes: list[Mode] = Field(
        default_factory=lambda: ["tool", "notool"],
        min_length=1,
        description="tool, notool and/or gated (p_tool vs agent.gate.threshold picks one)",
    )
    samples: int = Field(
        1, ge=1, description="K samples per item and mode (temperature > 0 if K > 1)"
    )
    concurrency: int = Field(8, ge=1, description="episodes in flight (the engine batches them)")
    seed: int = Field(0, description="benchmark shuffling and sampling seed")
    out: str = Field("runs/eval", description="run folder; rerunning into it resumes")
    bootstrap: int = Field(
        1000, ge=0, description="bootstrap resamples for confidence intervals (0: none)"
    )
    report: bool = Field(True, description="`beacon eval` writes report.md and plots at the end")

    @field_validator("limit")
    @classmethod
    def _positive_limit(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError(
                f"must be >= 1 item per benchmark, got {value}; leave it out to evaluate every item"
            )
        return value

    @model_validator(mode="after")
    def _check(self) -> EvalConfig:
        if self.engine.concurrency is None:
            # an openai engine holding fewer requests than there are episodes in flight caps the
            # run at its own limit (16 requests: 32 two-turn episodes a second at 250 ms a
            # turn, whatever --concurrency says)
            self.engine.concurrency = self.concurrency
        if self.samples > 1 and self.agent.temperature == 0:
            raise ValueError(
                f"samples={self.samples} at agent.temperature=0 gives K identical samples; "
                "set --set agent.temperature=1.0"
            )
        return self
