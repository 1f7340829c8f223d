"""Settings of ReVuE's components (the `revue:` section of an OPD job's config).

Defaults are the paper's (Appendix A.7): K = 32 teacher candidates, alpha = 0.2, lambda = 0.5,
critic at temperature 0 with a 2048-token output cap and at most 8 tool images per group.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from beacon.config import StrictModel, raise_problems

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

    @model_validator(mode="after")
    def _check(self) -> RevueConfig:
        raise_problems(self.validate())
        return self

    def validate(self) -> list[str]:  # type: ignore[override]  # BaseModel.validate is deprecated
        """Cross-field problems, reported with every other config problem at once."""
        from beacon.revue.weights import WEIGHTINGS

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
        if self.critic_max_tool_images < 0 or self.critic_retries < 0:
            problems.append("critic_max_tool_images and critic_retries must be >= 0")
        return problems
