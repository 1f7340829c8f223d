"""ReVuE: on-policy visual evidence distillation, as pure components (see docs/revue.md)."""

from beacon.revue.config import ALPHA_SWEEP, RevueConfig
from beacon.revue.impact import AdoptedTarget, adopted_target, token_impact
from beacon.revue.loss import batch_loss, support_reverse_kl, topk_reverse_kl, trajectory_loss
from beacon.revue.support import support_logits
from beacon.revue.teacher import TeacherScores, reduce_logits, teacher_topk
from beacon.revue.weights import (
    WEIGHTINGS,
    Weights,
    grouped_weights,
    high_count,
    impact_order,
    revue_weights,
)

__all__ = [
    "ALPHA_SWEEP",
    "WEIGHTINGS",
    "AdoptedTarget",
    "RevueConfig",
    "TeacherScores",
    "Weights",
    "adopted_target",
    "batch_loss",
    "grouped_weights",
    "high_count",
    "impact_order",
    "reduce_logits",
    "revue_weights",
    "support_logits",
    "support_reverse_kl",
    "teacher_topk",
    "token_impact",
    "topk_reverse_kl",
    "trajectory_loss",
]
