"""Settings of the data pipeline (`beacon data ...`): one file configures every stage.

Pydantic v2 models with `extra="forbid"`: an unknown key is an error, and each
`Field(description=...)` is the setting's documentation. The engine, agent and sandbox sections
are the eval runner's own settings (`beacon eval --show-config` lists them), because the
difficulty and expert stages *are* eval runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from beacon.agent.config import AgentConfig
from beacon.config import StrictModel, load_yaml
from beacon.eval.config import EngineConfig
from beacon.sandbox import SandboxConfig


class PoolConfig(StrictModel):
    """The training items: benchmarks with reference answers (never the evaluation sets)."""

    benchmarks: list[str] = Field(
        default_factory=lambda: ["synth"], min_length=1, description="registry names"
    )
    data: dict[str, str] = Field(default_factory=dict, description="benchmark -> local file")
    limit: int | None = Field(None, ge=1, description="items per benchmark (null: all)")
    seed: int = Field(0, description="benchmark seed (synth draws its items from it)")


class DifficultyConfig(StrictModel):
    """pass@k selection: K samples of the base model per item, keep the hard items."""

    engine: EngineConfig = Field(default_factory=EngineConfig, description="the base model")
    agent: AgentConfig = Field(
        default_factory=lambda: AgentConfig(temperature=1.0),
        description="agent loop of the base model's samples (temperature > 0 for K > 1)",
    )
    sandbox: SandboxConfig = Field(
        default_factory=SandboxConfig, description="sandbox (tool mode only)"
    )
    mode: Literal["notool", "tool"] = Field("notool", description="mode of the K samples")
    k: int = Field(5, ge=1, description="samples per item")
    max_correct: int = Field(
        2, ge=0, description="keep items correct at most this often (SFT: 2 of 5; RL: 3 of 5)"
    )
    concurrency: int = Field(8, ge=1, description="episodes in flight")

    @model_validator(mode="after")
    def _check(self) -> DifficultyConfig:
        if self.k > 1 and self.agent.temperature == 0:
            raise ValueError(
                f"k={self.k} samples at agent.temperature=0 are identical; set "
                "--set difficulty.agent.temperature=1.0"
            )
        if self.max_correct >= self.k:
            raise ValueError(
                f"max_correct={self.max_correct} >= k={self.k} keeps every item; set "
                "--set difficulty.max_correct=2"
            )
        return self


class ExpertConfig(StrictModel):
    """The expert that solves the selected items in tool mode, and writes hints."""

    engine: EngineConfig = Field(
        default_factory=lambda: EngineConfig(name="openai", model="expert"),
        description="an OpenAI-compatible server (engine.name=openai)",
    )
    agent: AgentConfig = Field(default_factory=AgentConfig, description="the expert's episodes")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description="sandbox")
    concurrency: int = Field(8, ge=1, description="episodes in flight")
    refine: bool = Field(
        False,
        description="ask the expert to rewrite the reasoning of verified trajectories (code and "
        "outputs kept verbatim; a rewrite is adopted only if its answer still verifies)",
    )

    @model_validator(mode="after")
    def _check(self) -> ExpertConfig:
        if self.engine.name != "openai":
            raise ValueError(
                f"expert.engine.name={self.engine.name!r}: the expert is an OpenAI-compatible "
                "server; set --set expert.engine.name=openai and expert.engine.base_url"
            )
        return self


class MixConfig(StrictModel):
    """Correct text-only trajectories of the base model mixed into the SFT set."""

    text_share: float = Field(
        0.1,
        ge=0.0,
        lt=1.0,
        description="share of the SFT set that is base-model text-only (against tool bias)",
    )
    seed: int = Field(0, description="which correct text-only trajectories are drawn")


class HintsConfig(StrictModel):
    """Answer-free hints (HGCE) written by the expert from its verified trajectory."""

    max_attempts: int = Field(2, ge=1, description="requests per item until a hint passes")
    max_tokens: int = Field(256, ge=1, description="hint length limit in tokens")
    temperature: float = Field(0.7, ge=0.0, description="sampling temperature of retries")


class DataConfig(StrictModel):
    """`beacon data`: difficulty -> expert (+ mixing) -> hints, all under `out`."""

    out: str = Field("runs/data", description="pipeline folder; rerunning a stage resumes")
    pool: PoolConfig = Field(default_factory=PoolConfig, description="training items")
    difficulty: DifficultyConfig = Field(
        default_factory=DifficultyConfig, description="pass@k selection"
    )
    expert: ExpertConfig = Field(default_factory=ExpertConfig, description="expert solutions")
    mix: MixConfig = Field(default_factory=MixConfig, description="text-only mixing")
    hints: HintsConfig = Field(default_factory=HintsConfig, description="hint writing")

    @property
    def root(self) -> Path:
        """`out` as a path: the folder every stage of the pipeline reads from and writes to."""
        return Path(self.out)


class DataConfigError(ValueError):
    """Every problem of one data config, one per line."""


def load_data_config(path: str | Path | None = None, overrides: list[str] = ()) -> DataConfig:
    """A YAML file (optional) with `--set a.b=value` overrides applied, validated at once."""
    raw: dict[str, Any] = {}
    if path is not None:
        text = Path(path).read_text(encoding="utf-8")
        raw = _load_yaml(path, text) or {}
        if not isinstance(raw, dict):
            raise DataConfigError(f"{path}: expected a mapping of settings")
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise DataConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. difficulty.k=5")
        _assign(raw, key.strip().split("."), _load_yaml(f"--set {item}", value) if value else "")
    try:
        return DataConfig.model_validate(raw)
    except ValidationError as exc:
        source = path or "data config"
        lines = [f"  {'.'.join(map(str, e['loc'])) or '(top)'}: {e['msg']}" for e in exc.errors()]
        raise DataConfigError(
            f"config error in {source} ({len(lines)} problems):\n" + "\n".join(lines)
        ) from None


def _load_yaml(source: str | Path, text: str) -> Any:
    """`beacon.config.load_yaml` (an alias bomb is refused), its error naming `source`."""
    try:
        return load_yaml(text)
    except yaml.YAMLError as exc:
        raise DataConfigError(f"{source}: not valid YAML: {' '.join(str(exc).split())}") from None


def _assign(tree: dict[str, Any], keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        node = tree.setdefault(key, {})
        if not isinstance(node, dict):
            raise DataConfigError(f"--set {'.'.join(keys)}: {key} is not a section")
        tree = node
    tree[keys[-1]] = value
