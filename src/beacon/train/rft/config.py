"""Settings of `beacon train rft`: the RFT baseline of the ReVuE comparisons (docs/train.md, "RFT").

The shape is OPD's (`beacon.train.opd.config.OPDConfig`), so one YAML serves both with a
section swapped: the same `model` (the student), `teacher.path`, `data` (the items) and
`rollout` (M = `rollout.group_size` attempts per item with the student's sampling settings),
plus `filter` (which teacher trajectories become SFT data) and the SFT `train` section.
`rollout.items_per_step` is not read: RFT samples every item once, before training.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from beacon.config import StrictModel, raise_problems
from beacon.engines.config import EngineConfig
from beacon.eval.config import EvalConfig
from beacon.train.core.config import OPERATIONAL_KEYS, ModelConfig, TrainConfig
from beacon.train.opd.config import OPDDataConfig, RolloutConfig


class RFTTeacherConfig(StrictModel):
    """The teacher whose verified trajectories the student is fine-tuned on."""

    path: str | None = Field(
        None,
        description="Teacher checkpoint folder (as for OPD), sampled in-process by the hf "
        "engine; leave null when teacher.engine names a served teacher.",
    )
    engine: EngineConfig | None = Field(
        None,
        description="Sample the teacher through this engine instead (e.g. name=openai with "
        "base_url and model: a vLLM server or a hosted API); null: hf on teacher.path.",
    )


class RFTFilterConfig(StrictModel):
    """Which teacher episodes are training data (`beacon.data.eval_stages.expert_drop_reason`)."""

    require_tool: bool = Field(
        False,
        description="Also drop verified episodes that ran no code (no_tool_call), as the data "
        "pipeline's expert stage does; the paper's RFT keeps every correct trajectory.",
    )
    max_length: int = Field(
        4096, ge=8, description="Trajectories longer than this many student tokens are dropped."
    )


class RFTConfig(StrictModel):
    """`beacon train rft`: sample the teacher, keep verified trajectories, SFT the student."""

    model: ModelConfig
    teacher: RFTTeacherConfig
    data: OPDDataConfig = Field(default_factory=OPDDataConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    filter: RFTFilterConfig = Field(default_factory=RFTFilterConfig)
    train: TrainConfig

    @model_validator(mode="after")
    def _check(self) -> RFTConfig:
        problems = []
        if (self.teacher.path is None) == (self.teacher.engine is None):
            problems.append(
                "set exactly one of teacher.path (a checkpoint, sampled in-process) and "
                "teacher.engine (a served teacher, e.g. teacher.engine={name: openai, ...})"
            )
        if self.rollout.group_size > 1 and self.rollout.agent.temperature == 0:
            problems.append(
                f"rollout.group_size={self.rollout.group_size} attempts at "
                "rollout.agent.temperature=0 are identical; set --set rollout.agent.temperature=1.0"
            )
        raise_problems(problems)
        return self


RFT_OPERATIONAL_KEYS = (
    OPERATIONAL_KEYS
    | {"rollout.batch_size"}
    | {f"teacher.{k}" for k in EvalConfig.OPERATIONAL_KEYS if k.startswith("engine.")}
    | {f"rollout.{k}" for k in EvalConfig.OPERATIONAL_KEYS if k.startswith("sandbox.")}
)
"""Keys a resume may change: the SFT loop's reporting keys, and the teacher run's operational
keys as `beacon eval` names them (server address, batch, sandbox workers): they change how the
teacher is reached, not what it samples."""
