"""Settings of `beacon train opd` (ReVuE): student, teacher, the teacher check, data, rollouts,
critic, loss, loop.

Defaults are the paper's where it gives one (M = 8, code at temperature 0.0, text at 1.0,
top-p 0.9, top-k 50; the `revue:` section holds K, alpha, lambda and the critic limits).
`train.global_batch_size` is not used: a step is `rollout.items_per_step` items x
`rollout.group_size` trajectories.
The `revue:` section (`RevueConfig`) holds ReVuE's own settings, the paper's defaults
(Appendix A.7): K = 32 teacher candidates, alpha = 0.2, lambda = 0.5, critic at temperature 0
with a 2048-token output cap and at most 8 tool images per group.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from beacon.agent.config import AgentConfig
from beacon.config import StrictModel, env_var_name, raise_problems
from beacon.engines.base import VllmExtensions
from beacon.sandbox.config import SandboxConfig
from beacon.train.core.config import (
    OPERATIONAL_KEYS,
    HealthConfig,
    ModelConfig,
    ServedRolloutConfig,
    TrainConfig,
)
from beacon.train.opd.revue_loss import WEIGHTINGS
from beacon.train.opd.shuffled import REFLECTION_SOURCES

ALPHA_SWEEP = (0.05, 0.1, 0.2, 0.5, 1.0)
"""The high-impact fractions of the paper's alpha sweep (Table 4); 1.0 makes Low empty, which
falls back to uniform averaging (Eq. 11, b_i = 0)."""


class RevueConfig(StrictModel):
    """Support size, grouping, weighting variant and critic limits."""

    k_support: int = Field(
        32, description="K: teacher top-K candidates the reverse KL is renormalised over (Eq. 8)"
    )
    alpha: float = Field(
        0.2, description="alpha: share of supervised positions in the High group, ceil(alpha|T|)"
    )
    lam: float = Field(
        0.5, description="lambda: total loss weight of the High group; Low gets 1 - lambda (Eq. 9)"
    )
    weighting: str = Field(
        "revue", description="weight function: revue, uniform, random_select, mask_top, ..."
    )
    chunk_size: int = Field(
        128, description="positions per block when reducing teacher logits (block x V floats)"
    )
    critic_max_tool_images: int = Field(8, description="tool images shown to the critic per group")
    critic_max_tokens: int = Field(2048, description="critic output cap")
    critic_retries: int = Field(
        2, description="extra critic attempts after a failed or unparsable reply"
    )
    critic_timeout_s: float = Field(120.0, description="one critic attempt's time limit")
    reflection_source: str = Field(
        "own",
        description="own: each rollout's teacher reads its own reflection (ReVuE); shuffled: "
        "the content control, each reads a whole reflection (text and support images) that "
        "was assembled for another item, drawn from the seed and step "
        "(beacon.train.opd.shuffled); a teacher check that finds it hurts then only warns.",
    )

    @model_validator(mode="after")
    def _check(self) -> RevueConfig:
        raise_problems(self.validate())
        return self

    def validate(self) -> list[str]:  # type: ignore[override]  # BaseModel.validate is deprecated
        """Cross-field problems, reported with every other config problem at once."""

        problems = []
        if self.k_support < 1:
            problems.append(f"k_support: must be >= 1, got {self.k_support}")
        if not 0 < self.alpha <= 1:
            problems.append(f"alpha: must be in (0, 1], got {self.alpha}")
        if not 0 < self.lam < 1:
            problems.append(f"lam: must be in (0, 1), got {self.lam}")
        if self.weighting not in WEIGHTINGS:
            problems.append(
                f"weighting: unknown {self.weighting!r}; choose one of {sorted(WEIGHTINGS)}"
            )
        for name in ("chunk_size", "critic_max_tokens"):
            if getattr(self, name) < 1:
                problems.append(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.reflection_source not in REFLECTION_SOURCES:
            problems.append(
                f"reflection_source: unknown {self.reflection_source!r}; choose one of "
                f"{list(REFLECTION_SOURCES)}"
            )
        if self.critic_max_tool_images < 0 or self.critic_retries < 0:
            problems.append("critic_max_tool_images and critic_retries must be >= 0")
        return problems


def _student_agent() -> AgentConfig:
    return AgentConfig(temperature=1.0, top_p=0.9, top_k=50, code_temperature=0.0)


class TeacherConfig(StrictModel):
    """The frozen teacher q, run in-process on the student's exact token ids."""

    path: str = Field(..., description="Teacher checkpoint folder; must share the student's vocab.")
    context: str = Field(
        "reflection",
        description="base: vanilla OPD; gt: GT-privileged (reference answer in the prompt); "
        "reflection: ReVuE (critic reflection + support images).",
    )
    base_url: str | None = Field(
        None,
        description="A teacher server (`beacon revue serve-teacher`, .../v1) scoring remotely; "
        "null runs the teacher in-process. teacher.path still names its tokenizer.",
    )
    api_key_env: str | None = Field(
        None, description="Environment variable holding the teacher server's API key."
    )
    _env_name = field_validator("api_key_env")(env_var_name)
    reencode_check: bool = Field(
        True,
        description="Re-encode the completion text with the teacher tokenizer and require the "
        "student's exact ids (Appendix A.3); a mismatch falls back to the base teacher.",
    )
    position: Literal["end", "before_question"] = Field(
        "end",
        description="Where the reflection (or reference answer) goes in the first user message: "
        "end (the paper's), or before_question (the question stays next to the answer, for "
        "teachers that copy from it by position).",
    )


class TeacherCheckConfig(StrictModel):
    """Before step 1: is the teacher better than the student on the student's own rollouts?"""

    enabled: bool = Field(True, description="Run the check (its result: RUN/teacher_check.json).")
    items: int = Field(8, ge=1, description="Items of the pool probed (the pool's first N).")
    min_logprob_gain: float = Field(
        1e-3,
        description="Nats per token by which the teacher's mean log-prob of the student's "
        "verified-correct continuations must exceed the student's own.",
    )
    on_fail: Literal["error", "warn"] = Field(
        "error",
        description="A teacher that is not better: stop before step 1 (error) or train anyway "
        "(warn; e.g. the teacher = student control run).",
    )
    context_tolerance: float = Field(
        0.01,
        ge=0,
        description="Nats per token by which the context may lower the teacher's log-prob of "
        "correct continuations (overall or on coordinate tokens) before it counts as hurting.",
    )
    on_context_hurts: Literal["error", "warn"] = Field(
        "warn",
        description="A conditioned teacher (reflection, gt) whose context lowers its log-prob "
        "of correct continuations: warn, or stop before step 1 (error).",
    )


class OPDDataConfig(StrictModel):
    """The training items (a registered benchmark, e.g. the generated `synth`)."""

    benchmark: str = Field("synth", description="Benchmark name (beacon.benchmarks registry).")
    path: str | None = Field(None, description="Benchmark file or folder; null for synth.")
    limit: int = Field(16, ge=1, description="Items loaded.")
    seed: int = Field(0, description="Benchmark seed (synth draws items from it).")


class RolloutConfig(ServedRolloutConfig):
    """Student rollouts through the agent loop and the sandbox, on an in-process engine or the
    `beacon serve` processes of `servers` (`ServedRolloutConfig`, as GRPO's)."""

    group_size: int = Field(8, ge=1, description="M: trajectories per item.")
    items_per_step: int = Field(2, ge=1, description="Items per optimizer step.")
    agent: AgentConfig = Field(default_factory=_student_agent, description="Agent loop settings.")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description="Sandbox limits.")
    batch_size: int = Field(16, ge=1, description="Generation batch of the in-process engine.")


class CriticConfig(StrictModel):
    """Which critic writes the reflections (a reflection teacher needs one; base and gt do not):
    an OpenAI-compatible endpoint, or, named explicitly, the scripted synth critic."""

    kind: Literal["http", "scripted"] = Field(
        "http",
        description="http: the endpoint at base_url; scripted: the scripted synth critic "
        "(beacon.train.opd.scripted_critic, answers from ground truth, synth items only) served "
        "on a local port for the run, for offline runs and tests.",
    )
    base_url: str | None = Field(
        None, description="OpenAI-compatible base URL ending in /v1 (kind: http)."
    )
    model: str = Field("critic", description="Model name sent in the request.")
    api_key_env: str | None = Field(None, description="Environment variable holding the API key.")
    vllm_extensions: VllmExtensions = Field(
        "off",
        description="Send vLLM's extra request fields (on, off, auto: until a 400 names one); "
        "the critic's text is all that is read, so off suits every server.",
    )

    _env_name = field_validator("api_key_env")(env_var_name)


class OPDConfig(StrictModel):
    """`beacon train opd`: on-policy distillation with ReVuE's reflections and weights."""

    model: ModelConfig
    teacher: TeacherConfig
    teacher_check: TeacherCheckConfig = Field(default_factory=TeacherCheckConfig)
    data: OPDDataConfig = Field(default_factory=OPDDataConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    critic: CriticConfig = Field(default_factory=CriticConfig)
    revue: RevueConfig = Field(default_factory=RevueConfig)
    min_loss: float = Field(
        1e-6,
        ge=0,
        description="A step whose loss (mean top-K reverse KL) is below this carries no "
        "learning signal: its optimizer step is skipped (a teacher equal to the student gives "
        "~1e-8 of float noise, which Adam would turn into full-size steps); 0 turns it off.",
    )
    train: TrainConfig
    health: HealthConfig = Field(default_factory=HealthConfig, description="Health alarms.")

    @model_validator(mode="after")
    def _check(self) -> OPDConfig:
        # lazy: a cycle (beacon.train.opd.step imports RevueConfig from here)
        from beacon.train.opd.step import TEACHER_CONTEXTS

        if self.teacher.context not in TEACHER_CONTEXTS:
            choices = sorted(TEACHER_CONTEXTS)
            raise ValueError(f"teacher.context={self.teacher.context!r}; choose one of {choices}")
        if self.revue.reflection_source == "shuffled" and self.teacher.context != "reflection":
            raise ValueError(
                f"revue.reflection_source=shuffled swaps the reflections between items, but "
                f"teacher.context={self.teacher.context!r} reads none; set "
                f"teacher.context=reflection, or revue.reflection_source=own"
            )
        critic = self.critic
        if critic.kind == "scripted" and critic.base_url is not None:
            raise ValueError(
                f"critic.kind=scripted serves its own critic, but critic.base_url="
                f"{critic.base_url!r} names another; drop one of the two"
            )
        if self.teacher.context == "reflection" and critic.kind == "http" and not critic.base_url:
            raise ValueError(
                "teacher.context=reflection needs a critic, and none is named: set "
                "critic.base_url to an OpenAI-compatible endpoint (.../v1), or critic.kind="
                "scripted for the scripted synth critic (offline, synth items only)"
            )
        return self


OPD_OPERATIONAL_KEYS = OPERATIONAL_KEYS | {
    "teacher_check.on_fail",
    "teacher_check.on_context_hurts",
    "teacher_check.context_tolerance",
    "teacher_check.min_logprob_gain",
}
"""Keys a resume may change: the loop's reporting keys, and what a failed teacher check does
(rerun with `--resume --set teacher_check.on_fail=warn` to train with that teacher anyway)."""
