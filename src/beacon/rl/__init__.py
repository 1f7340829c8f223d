"""GRPO components of the Beacon paper: pure functions over dataclasses and tensors, no engine.

- rewards: `naar_rewards` (the paper's R = 0.1·R_format + 0.9·R_adaptive), the registry of group
  rewards (`naar`, `binary`, `blog`) and `blog_reward`;
- format: `format_check` / `format_reward` over a Trajectory;
- advantages / filtering: `group_advantages` (`flat_rewards` lays groups end to end),
  `filter_groups` with drop counts by reason;
- loss: `grpo_loss` (clipped, token-level, optional k3 KL, sequence- or token-mean);
- hgce / hints / sequences: HGCE's trigger, `hint_leaks`, and the prompt swap with aligned old
  log-probs;
- health: the numbers behind the trainers' health alarms (log-prob gap, entropy, tool rates,
  zero-variance groups);
- stats: one step's metrics; scoring: `score_groups` runs rewards -> filter -> advantages ->
  stats for one step; difficulty: the blog's labels and pitfall warnings.

Formulas and the choices where the sources disagree: docs/rl.md.
"""

from beacon.rl.advantages import FlatRewards, flat_rewards, group_advantages
from beacon.rl.config import BlogConfig, FilterConfig, HGCEConfig, LossConfig, NAARConfig, RLConfig
from beacon.rl.difficulty import (
    answer_confidence,
    difficulty_warnings,
    item_label,
    label_from_confidence,
    label_from_passes,
    tool_needed,
    warn_difficulty,
)
from beacon.rl.filtering import DROP_REASONS, GroupFilter, drop_reason, filter_groups
from beacon.rl.format import FormatCheck, format_check, format_reward
from beacon.rl.groups import Difficulty, GroupOutcomes
from beacon.rl.health import (
    TokenHealth,
    chunked_logprob_entropy,
    entropy_sum,
    group_health,
    logprob_gap_sum,
)
from beacon.rl.hgce import HintCheck, check_hint, needs_hint, rescued
from beacon.rl.hints import hint_leaks, leak_reasons
from beacon.rl.loss import GRPOLossOutput, aggregate, grpo_loss, importance_ratio, k3_kl
from beacon.rl.rewards import (
    REWARDS,
    blog_reward,
    get_reward,
    naar_adaptive,
    naar_rewards,
    register_reward,
    total_reward,
)
from beacon.rl.scoring import GroupScores, group_outcomes, score_groups
from beacon.rl.sequences import (
    TrainingSequence,
    align_old_logprobs,
    token_logprobs,
    training_sequence,
    without_hint,
)
from beacon.rl.stats import StepStats, step_stats

__all__ = [
    "DROP_REASONS",
    "REWARDS",
    "BlogConfig",
    "Difficulty",
    "FilterConfig",
    "FlatRewards",
    "FormatCheck",
    "GRPOLossOutput",
    "GroupFilter",
    "GroupOutcomes",
    "GroupScores",
    "HGCEConfig",
    "HintCheck",
    "LossConfig",
    "NAARConfig",
    "RLConfig",
    "StepStats",
    "TokenHealth",
    "TrainingSequence",
    "aggregate",
    "align_old_logprobs",
    "answer_confidence",
    "blog_reward",
    "check_hint",
    "chunked_logprob_entropy",
    "difficulty_warnings",
    "drop_reason",
    "entropy_sum",
    "filter_groups",
    "flat_rewards",
    "format_check",
    "format_reward",
    "get_reward",
    "group_advantages",
    "group_health",
    "group_outcomes",
    "grpo_loss",
    "hint_leaks",
    "importance_ratio",
    "item_label",
    "k3_kl",
    "label_from_confidence",
    "label_from_passes",
    "leak_reasons",
    "logprob_gap_sum",
    "naar_adaptive",
    "naar_rewards",
    "needs_hint",
    "register_reward",
    "rescued",
    "score_groups",
    "step_stats",
    "token_logprobs",
    "tool_needed",
    "total_reward",
    "training_sequence",
    "warn_difficulty",
    "without_hint",
]
