"""ReVuE: on-policy visual evidence distillation, as pure components (see docs/revue.md).

Per group: the benchmark's verdicts and `group_kind` (Alg. 2) -> `observed_states` (Alg. 3) ->
`build_critic_request` + `ask_critic` -> `check_and_assemble` (Alg. 4). Per trajectory:
`reflection_text` + `condition_messages` for the teacher, `check_alignment`, `teacher_topk` for
both teachers, `adopted_target` (Eq. 10, with `token_impact`, Eq. 7), `support_logits` +
`topk_reverse_kl` (Eq. 8), `grouped_weights` (Eq. 9/11), `trajectory_loss`; then `batch_loss`.
"""

from beacon.revue.assemble import (
    Anchor,
    Assembly,
    BreakPoint,
    Reflection,
    anchor_cost,
    check_and_assemble,
    select_anchor,
)
from beacon.revue.conditioning import (
    AlignmentCheck,
    check_alignment,
    check_reencoding,
    condition_messages,
    reflection_text,
)
from beacon.revue.config import ALPHA_SWEEP, RevueConfig
from beacon.revue.critic import CriticReply, CriticRequest, ask_critic, build_critic_request
from beacon.revue.critic_output import (
    CRITIC_SCHEMA,
    RESPONSE_FORMAT,
    CriticOutput,
    CriticOutputError,
    Diagnosis,
    Grounding,
    Reading,
    SufficientState,
    parse_critic_output,
)
from beacon.revue.critic_prompts import SYSTEM_PROMPTS
from beacon.revue.impact import AdoptedTarget, adopted_target, token_impact
from beacon.revue.loss import batch_loss, support_reverse_kl, topk_reverse_kl, trajectory_loss
from beacon.revue.states import ObservedState, ObservedStates, observed_states, rollout_id
from beacon.revue.stats import coverage_counts, impact_sparsity, slot_statuses, stage_counts
from beacon.revue.support import support_logits
from beacon.revue.teacher import TeacherScores, reduce_logits, teacher_topk
from beacon.revue.verdicts import GroupKind, group_kind
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
    "CRITIC_SCHEMA",
    "RESPONSE_FORMAT",
    "SYSTEM_PROMPTS",
    "WEIGHTINGS",
    "AdoptedTarget",
    "AlignmentCheck",
    "Anchor",
    "Assembly",
    "BreakPoint",
    "CriticOutput",
    "CriticOutputError",
    "CriticReply",
    "CriticRequest",
    "Diagnosis",
    "Grounding",
    "GroupKind",
    "ObservedState",
    "ObservedStates",
    "Reading",
    "Reflection",
    "RevueConfig",
    "SufficientState",
    "TeacherScores",
    "Weights",
    "adopted_target",
    "anchor_cost",
    "ask_critic",
    "batch_loss",
    "build_critic_request",
    "check_alignment",
    "check_and_assemble",
    "check_reencoding",
    "condition_messages",
    "coverage_counts",
    "group_kind",
    "grouped_weights",
    "high_count",
    "impact_order",
    "impact_sparsity",
    "observed_states",
    "parse_critic_output",
    "reduce_logits",
    "reflection_text",
    "revue_weights",
    "rollout_id",
    "select_anchor",
    "slot_statuses",
    "stage_counts",
    "support_logits",
    "support_reverse_kl",
    "teacher_topk",
    "token_impact",
    "topk_reverse_kl",
    "trajectory_loss",
]
