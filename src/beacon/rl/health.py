"""The numbers behind the trainers' health alarms (`beacon.train.core.health`), as pure functions.

Per token, over the generated (loss-masked) positions of a step's rollouts:

    sampler log-prob gap  = mean_t |log π_sampler(y_t) − log π_trainer(y_t)|
    entropy               = mean_t H_t,   H_t = −Σ_v p_t(v) log p_t(v)

Both sides of the gap are log-probs of the *raw* distribution (temperature 1, no top-p/top-k,
no logits processor): the engines record those (`beacon.engines.hf`, vLLM's
`raw_logprobs`), and the trainer's forward gives them, so the gap is ~0 for any sampling
settings when the engine holds the trainer's weights, and grows with stale weights, another
chat template or misplaced image positions. The entropy is that of the trainer's next-token
distribution at the sampled positions.

Per group (un-hinted groups: the policy's own behaviour):

    tool_rate              = share of responses that wrote a tool call
    tool_rate_easy / _hard = the same over the groups whose item the run labels easy / hard
                             (`GroupOutcomes.label`, e.g. synth's `metadata["difficulty"]`)
    zero_variance_groups   = share of groups whose rewards are all equal (no advantage, no
                             learning signal)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from beacon.rl.groups import GroupOutcomes


@dataclass
class TokenHealth:
    """Sums over a step's generated tokens: |gap| where the sampler gave a log-prob, entropy
    everywhere; `as_metrics` gives the means (NaN without tokens)."""

    gap_sum: float = 0.0
    gap_tokens: int = 0
    entropy_sum: float = 0.0
    entropy_tokens: int = 0

    def add(self, other: TokenHealth) -> None:
        """Add another batch's sums (micro-batches, processes) into these."""
        self.gap_sum += other.gap_sum
        self.gap_tokens += other.gap_tokens
        self.entropy_sum += other.entropy_sum
        self.entropy_tokens += other.entropy_tokens

    def as_list(self) -> list[float]:
        """The four sums, for a reduction over processes (`from_list` reads them back)."""
        return [self.gap_sum, self.gap_tokens, self.entropy_sum, self.entropy_tokens]

    @classmethod
    def from_list(cls, values: Sequence[float]) -> TokenHealth:
        return cls(float(values[0]), int(values[1]), float(values[2]), int(values[3]))

    def as_metrics(self) -> dict[str, float]:
        """The means as `health/` metrics (NaN where no token was counted)."""
        return {
            "health/sampler_logprob_gap": _ratio(self.gap_sum, self.gap_tokens),
            "health/entropy": _ratio(self.entropy_sum, self.entropy_tokens),
        }


def logprob_gap_sum(trainer_logp: Tensor, sampler_logp: Tensor, mask: Tensor) -> tuple[float, int]:
    """Σ |sampler − trainer| log-prob over `mask` and the number of tokens summed (all [B, L]).

    `sampler_logp` is NaN where the sampler gave none (a hinted row, whose sampled context is
    not the trained one; an engine without log-probs); those positions add nothing.
    """
    on = mask.bool() & sampler_logp.isfinite()
    return float((sampler_logp - trainer_logp).abs()[on].sum()), int(on.sum())


def entropy_sum(logits: Tensor, mask: Tensor, chunk_size: int = 1024) -> tuple[float, int]:
    """Σ_t H_t over the positions t of `mask` [B, L] and their number; H_t = −Σ_v p log p of
    the distribution that predicts token t (from `logits` [B, L, V] at t − 1), computed over
    `chunk_size` positions at a time (never a second [B, L, V] tensor)."""
    picked = logits[:, :-1][mask[:, 1:].bool()]
    total = 0.0
    for start in range(0, picked.shape[0], chunk_size):
        logp = torch.log_softmax(picked[start : start + chunk_size].float(), dim=-1)
        total += float(-(logp.exp() * logp).sum())
    return total, int(picked.shape[0])


def chunked_logprob_entropy(
    hidden: Tensor, weight: Tensor, ids: Tensor, chunk_size: int, bias: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Full-vocabulary log-prob of `ids` [T] and entropy [T] from final hidden states [T, H]
    and the output projection `weight` [V, H], holding one [chunk_size, V] block at a time
    (no gradient: these are measurements)."""
    logps, entropies = [], []
    with torch.no_grad():
        for start in range(0, hidden.shape[0], chunk_size):
            block = hidden[start : start + chunk_size] @ weight.T
            if bias is not None:
                block = block + bias
            logp = torch.log_softmax(block.float(), dim=-1)
            picked = ids[start : start + chunk_size].unsqueeze(-1)
            logps.append(logp.gather(-1, picked).squeeze(-1))
            entropies.append(-(logp.exp() * logp).sum(-1))
    if not logps:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty
    return torch.cat(logps), torch.cat(entropies)


def group_health(
    groups: Sequence[GroupOutcomes], rewards: Sequence[Sequence[float]] | None = None
) -> dict[str, float]:
    """`health/tool_rate`, `health/tool_rate_easy`, `health/tool_rate_hard` over the un-hinted
    groups, and with `rewards` (aligned to `groups`) `health/zero_variance_groups`."""
    own = [i for i, g in enumerate(groups) if not g.hinted]

    def rate(label: str | None) -> float:
        used = [u for i in own if label in (None, groups[i].label) for u in groups[i].used_tool]
        return _ratio(sum(used), len(used))

    out = {
        "health/tool_rate": rate(None),
        "health/tool_rate_easy": rate("easy"),
        "health/tool_rate_hard": rate("hard"),
    }
    if rewards is not None:
        flat = [max(rewards[i]) == min(rewards[i]) for i in own if rewards[i]]
        out["health/zero_variance_groups"] = _ratio(sum(flat), len(flat))
    return out


def _ratio(total: float, count: int) -> float:
    return total / count if count else math.nan
