"""One GRPO policy update over a step's kept responses: old log-probs, clipped loss, backward.

Each kept response becomes a `PolicyRow`: its training sequence (the un-hinted prompt + the
response ids, token-exact, via `beacon.train.core.encode`) and, for an HGCE response, the
sequence it was sampled from (hinted prompt + response).

Old log-probs are recomputed under the training forward at T = 1, never taken from the sampler
(docs/rl.md §5):

1. un-hinted rows: one update per rollout batch means π_old is the current policy, so the
   training forward's own log-probs, detached, *are* the recomputed old log-probs (exact, and
   no second forward); the ratio is 1 and the clip inactive, as the feasibility study saw;
2. HGCE rows: a no-grad forward over the hinted ids before any gradient, moved onto the
   un-hinted positions with `align_old_logprobs`, so r_t = π_θ(o_t | q, o_<t) /
   π_old(o_t | q + hint, o_<t) (beacon.md §4 step 4).

The loss is `grpo_loss` with `normalizer` = the step's sequence count (sequence_mean) or
generated-token count (token_mean) over all processes, so micro-batch and per-process losses
add up to the step's loss; micro-batches run and back-propagate as every trainer's do
(`train.core.loop.accumulate` and `backward`).

Hinted rows (`HintRatio`, `rl/hint_*`, under no gradient): over the generated tokens of the HGCE
rows, the mean log r_t = log π_θ(o_t | q) − log π_old(o_t | q + hint), the same mean on the crop
coordinates inside code (`code_digit_mask`: which box a crop takes, the decisive tokens of a
crop), and the share of tokens whose clipped term the loss takes, apart for rows with A > 0
(successes, r > 1 + ε_high cut) and A < 0 (hint-ignoring failures, r < 1 − ε cut): which term
drives. One update per rollout batch means every micro-batch runs before the optimizer step,
at the weights that sampled the rollouts, so these are read before the policy moves:
log r_t is the hint's own effect on the token at fixed weights.

Health (`beacon.train.core.health`, under no gradient): the same forward gives the sampler log-prob
gap (un-hinted rows: their sampled context is the trained one) and the entropy at every
generated position of the rows it trains on, or of the one placeholder row when none is kept.

What is not covered: several updates per rollout batch.

Loss: The clipped GRPO objective at token level, with an optional k3 KL to a reference model.

Notation (DeepSeekMath GRPO, Eq. 3; the Beacon paper §3 "策略优化" uses "the clipped GRPO
objective" without further detail): response i of the batch has tokens o_{i,t}, t = 1..|o_i|,
only generated tokens count (mask m_{i,t} = 1; prompt and observation tokens are 0).

    r_{i,t} = exp(log π_θ(o_{i,t}) - log π_old(o_{i,t}))                          (ratio)
    s_{i,t} = min(r_{i,t} · A_i, clip(r_{i,t}, 1 - ε_low, 1 + ε_high) · A_i)      (surrogate)
    k3_{i,t} = exp(log π_ref - log π_θ) - (log π_ref - log π_θ) - 1  >= 0       (Schulman's k3)
    ℓ_{i,t} = -s_{i,t} + β · k3_{i,t}

Aggregation (`rl.loss.aggregation`):
    sequence_mean:  L = 1/B Σ_i 1/|o_i| Σ_t m_{i,t} ℓ_{i,t}       (GRPO as published; default)
    token_mean:     L = Σ_{i,t} m_{i,t} ℓ_{i,t} / Σ_{i,t} m_{i,t}   (DAPO; long answers weigh more)
The Beacon paper does not say which it uses; "the clipped GRPO objective" as defined is
sequence_mean, so that is the default.

Gradient accumulation: pass `normalizer` (the number of sequences, or of generated tokens, in the
whole optimizer batch) so that micro-batch losses add up to the full-batch loss exactly.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch
from torch import Tensor

from beacon.train.core import train_loop as loop
from beacon.train.core.collate import IGNORE_INDEX, ModelBatch, plan_buckets
from beacon.train.core.encode import (
    EncodedTrajectory,
    align_old_logprobs,
    code_digit_mask,
    encode_trajectory,
    token_logprobs,
    training_sequence,
)
from beacon.train.core.health import TokenHealth, entropy_sum, logprob_gap_sum
from beacon.train.grpo.config import Aggregation, LossConfig
from beacon.types import Trajectory

Collate = Callable[[list[EncodedTrajectory]], ModelBatch]


@dataclass
class PolicyRow:
    """One kept response: what trains, what it was sampled after (HGCE only), its advantage.

    `weight` is 1, or 0 for the placeholder row of a process that has nothing to train (it
    joins the gradient all-reduce and adds nothing).
    """

    encoded: EncodedTrajectory
    sampling: EncodedTrajectory | None
    advantage: float
    weight: int = 1
    sampler_logprobs: list[float] | None = None  # on `encoded` positions; un-hinted rows only
    coords: list[bool] | None = None  # on `encoded` positions: crop coordinates; hinted rows only


@dataclass
class StepTotals:
    """Counts of the whole step over all processes: the loss's normaliser."""

    sequences: int
    loss_tokens: int

    def normalizer(self, aggregation: str) -> float:
        count = self.sequences if aggregation == "sequence_mean" else self.loss_tokens
        return float(max(count, 1))


@dataclass
class HintRatio:
    """Sums over the generated tokens of a step's HGCE rows (module docstring, "Hinted rows"):
    log r_t, on all of them and on the crop coordinates, and how many of them the clip cut,
    by the sign of their row's advantage. `as_metrics` gives the `rl/hint_*` lines."""

    log_ratio_sum: float = 0.0
    tokens: int = 0
    coords_log_ratio_sum: float = 0.0
    coords_tokens: int = 0
    clipped_pos: int = 0
    tokens_pos: int = 0
    clipped_neg: int = 0
    tokens_neg: int = 0

    def add(self, other: HintRatio) -> None:
        """Add another batch's sums (micro-batches) into these."""
        for name, value in vars(other).items():
            setattr(self, name, getattr(self, name) + value)

    def as_list(self) -> list[float]:
        """The sums in field order, for a reduction over processes (`from_list` reads them)."""
        return [float(v) for v in vars(self).values()]

    @classmethod
    def from_list(cls, values: Sequence[float]) -> HintRatio:
        return cls(*(type(f.default)(v) for f, v in zip(fields(cls), values, strict=True)))

    def as_metrics(self) -> dict[str, float | int]:
        """Means and shares (NaN where no token was counted), and the token counts behind them."""
        return {
            "rl/hint_log_ratio": _share(self.log_ratio_sum, self.tokens),
            "rl/hint_log_ratio_coords": _share(self.coords_log_ratio_sum, self.coords_tokens),
            "rl/hint_clipped_pos": _share(self.clipped_pos, self.tokens_pos),
            "rl/hint_clipped_neg": _share(self.clipped_neg, self.tokens_neg),
            "rl/hint_tokens": self.tokens,
            "rl/hint_tokens_coords": self.coords_tokens,
            "rl/hint_tokens_pos": self.tokens_pos,
            "rl/hint_tokens_neg": self.tokens_neg,
        }


@dataclass
class UpdateResult:
    """This process's share of one update (sums; means weighted by the step's token count)."""

    loss: float = 0.0
    sequences: int = 0
    loss_tokens: int = 0
    tokens: int = 0
    padded_tokens: int = 0
    microbatches: int = 0
    clip_frac: float = 0.0
    ratio_mean: float = 0.0
    ratio_max: float = 0.0
    kl: float = 0.0  # k3 estimate of KL(π_old || π_θ) per generated token (HGCE rows only > 0)
    old_logprobs_s: float = 0.0
    update_s: float = 0.0
    health: TokenHealth = field(default_factory=TokenHealth)
    hint: HintRatio = field(default_factory=HintRatio)


@dataclass
class MicroLoss:
    """One micro-batch's loss output, its share of the step's KL(π_old || π_θ), its batch."""

    out: GRPOLossOutput
    kl: torch.Tensor
    batch: ModelBatch
    health: TokenHealth
    hint: HintRatio


def _share(total: float, count: int) -> float:
    return total / count if count else math.nan


def hint_ratio_sums(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    hinted: Tensor,
    coords: Tensor,
    clip_eps: float,
    clip_eps_high: float | None = None,
) -> HintRatio:
    """`HintRatio` of one batch: logp, old_logp, mask (generated tokens, row weight applied) and
    coords are [B, T]; advantages and hinted (the row's old log-probs are the hinted prompt's)
    are [B]. A token is clipped when `grpo_loss` takes its clipped term (its gradient is cut):
    r > 1 + ε_high at A > 0, r < 1 − ε at A < 0."""
    on = mask.bool() & hinted.bool()[:, None]
    log_ratio = logp.detach() - old_logp.detach()
    adv = advantages[:, None].expand_as(on)
    pos, neg = on & (adv > 0), on & (adv < 0)
    cut = clip_cut(log_ratio.exp(), adv, clip_eps, clip_eps_high)
    coords_on = on & coords.bool()
    return HintRatio(
        log_ratio_sum=float(log_ratio[on].sum()),
        tokens=int(on.sum()),
        coords_log_ratio_sum=float(log_ratio[coords_on].sum()),
        coords_tokens=int(coords_on.sum()),
        clipped_pos=int((pos & cut).sum()),
        tokens_pos=int(pos.sum()),
        clipped_neg=int((neg & cut).sum()),
        tokens_neg=int(neg.sum()),
    )


def clip_cut(
    ratio: Tensor, adv: Tensor, clip_eps: float, clip_eps_high: float | None = None
) -> Tensor:
    """True where the clipped surrogate's min takes the clipped term, so the token's gradient is
    cut: r > 1 + ε_high at A > 0, r < 1 − ε at A < 0 (never at A = 0). Shapes broadcast."""
    high = clip_eps if clip_eps_high is None else clip_eps_high
    return ratio.clamp(1.0 - clip_eps, 1.0 + high) * adv < ratio * adv


def policy_rows(
    trajectories: Sequence[Trajectory], advantages: Sequence[float], tokenizer: Any
) -> list[PolicyRow]:
    """Rows of the kept responses; a hinted response also keeps its hinted sampling layout."""
    rows = []
    for traj, adv in zip(trajectories, advantages, strict=True):
        encoded = encode_trajectory(traj, tokenizer)
        sampling, sampler, coords = None, None, None
        if traj.original_prompt is not None:
            sampling = encode_trajectory(replace(traj, original_prompt=None), tokenizer)
            coords = code_digit_mask(traj, tokenizer.decode)
        else:
            sampler = training_sequence(traj).sampler_logprobs
        row = PolicyRow(encoded, sampling, float(adv), sampler_logprobs=sampler, coords=coords)
        rows.append(row)
    return rows


def hinted_old_logprobs(
    accelerator: Any,
    model: torch.nn.Module,
    rows: Sequence[PolicyRow],
    trajectories: Sequence[Trajectory],
    collate_fn: Collate,
) -> dict[int, torch.Tensor]:
    """Row index -> old log-probs [L] of an HGCE row: forward over the hinted ids, aligned onto
    the un-hinted layout (zeros on the prompt). Every process runs as many forwards (a process
    with fewer hinted rows repeats row 0's, unused): a sharded model gathers its parameters in
    each, a collective all processes join (`loop.most_of_all`)."""
    hinted = [i for i, row in enumerate(rows) if row.sampling is not None]
    out = {}
    with torch.no_grad():
        for n in range(loop.most_of_all(accelerator, len(hinted))):
            if n >= len(hinted):
                batch = collate_fn([rows[0].encoded]).to(accelerator.device)
                model(**batch.model_inputs())
                continue
            i = hinted[n]
            batch = collate_fn([rows[i].sampling]).to(accelerator.device)
            logits = model(**batch.model_inputs()).logits
            logp = token_logprobs(logits.float(), batch.input_ids)[0]
            sequence = training_sequence(trajectories[i])
            assert sequence.token_ids == rows[i].encoded.input_ids, "encode and rl layouts differ"
            out[i] = align_old_logprobs(logp, sequence)
    return out


def policy_update(
    accelerator: Any,
    model: torch.nn.Module,
    rows: Sequence[PolicyRow],
    old_hinted: dict[int, torch.Tensor],
    collate_fn: Collate,
    loss_cfg: LossConfig,
    max_tokens_per_microbatch: int,
    microbatch_cost_tokens: int,
    totals: StepTotals,
) -> UpdateResult:
    """Accumulate the gradient of the clipped GRPO loss over this process's `rows` (no
    optimizer step), micro-batches as every trainer runs them (`loop.accumulate`: a process
    with fewer runs its first micro-batch again at weight 0). Rows are packed as SFT packs
    them (`plan_buckets` with the per-micro-batch cost); without that cost every row went
    alone, as the least padding: 16 forward passes where 1 does."""
    start = time.perf_counter()
    result = UpdateResult(sequences=sum(r.weight for r in rows))
    if not rows:
        return result
    result.loss_tokens = sum(r.encoded.num_loss_tokens * r.weight for r in rows)
    normalizer = totals.normalizer(loss_cfg.aggregation)
    plan = plan_buckets(
        [len(r.encoded) for r in rows], max_tokens_per_microbatch, microbatch_cost_tokens
    )
    for n in loop.accumulate(accelerator, model, len(plan)):
        indices = plan[n] if n < len(plan) else plan[0]
        micro_rows = [rows[i] if n < len(plan) else replace(rows[i], weight=0) for i in indices]
        micro = _microbatch_loss(
            accelerator,
            model,
            micro_rows,
            [old_hinted.get(i) for i in indices],
            collate_fn,
            loss_cfg,
            normalizer,
            totals.loss_tokens,
        )
        loop.backward(accelerator, micro.out.loss)
        if n >= len(plan):  # a placeholder: it trains nothing and reports nothing
            continue
        weight = micro.out.num_tokens / max(totals.loss_tokens, 1)
        result.loss += float(micro.out.loss.detach())
        result.clip_frac += float(micro.out.clip_frac) * weight
        result.ratio_mean += float(micro.out.ratio_mean) * weight
        result.kl += float(micro.kl)
        if micro.out.num_tokens:
            result.ratio_max = max(result.ratio_max, float(micro.out.ratio_max))
        result.tokens += micro.batch.num_tokens
        result.padded_tokens += micro.batch.input_ids.numel()
        result.microbatches += 1
        result.health.add(micro.health)
        result.hint.add(micro.hint)
    result.update_s = time.perf_counter() - start
    return result


def _microbatch_loss(
    accelerator: Any,
    model: torch.nn.Module,
    rows: Sequence[PolicyRow],
    old_hinted: Sequence[torch.Tensor | None],
    collate_fn: Collate,
    loss_cfg: LossConfig,
    normalizer: float,
    step_tokens: int,
) -> MicroLoss:
    """`grpo_loss` of one micro-batch, old log-probs filled in (detached own, or HGCE's)."""
    batch = collate_fn([r.encoded for r in rows]).to(accelerator.device)
    logits = model(**batch.model_inputs()).logits
    logp = token_logprobs(logits.float(), batch.input_ids)
    old = logp.detach().clone()
    for j, hinted in enumerate(old_hinted):
        if hinted is not None:
            old[j, : hinted.shape[0]] = hinted.to(old.device)
    weights = torch.tensor([float(r.weight) for r in rows], device=logp.device)
    mask = (batch.labels != IGNORE_INDEX).to(logp.dtype) * weights[:, None]
    adv = torch.tensor([r.advantage for r in rows], device=logp.device)
    out = grpo_loss(
        logp,
        old,
        adv,
        mask,
        clip_eps=loss_cfg.clip_eps,
        clip_eps_high=loss_cfg.clip_eps_high,
        aggregation=loss_cfg.aggregation,
        normalizer=normalizer,
    )
    kl = aggregate(k3_kl(logp.detach(), old), mask, "token_mean", normalizer=max(step_tokens, 1))
    generated = batch.labels != IGNORE_INDEX  # a weight-0 placeholder row is measured too
    health = _health(rows, logits.detach(), logp.detach(), generated)
    hinted = torch.tensor([h is not None for h in old_hinted], device=logp.device)
    coords = torch.zeros_like(mask, dtype=torch.bool)
    for j, row in enumerate(rows):
        if row.coords is not None:
            coords[j, : len(row.coords)] = torch.tensor(row.coords, dtype=torch.bool)
    hint = hint_ratio_sums(
        logp.detach(), old, adv, mask, hinted, coords, loss_cfg.clip_eps, loss_cfg.clip_eps_high
    )
    return MicroLoss(out, kl, batch, health, hint)


def _health(
    rows: Sequence[PolicyRow], logits: torch.Tensor, logp: torch.Tensor, mask: torch.Tensor
) -> TokenHealth:
    """Sampler log-prob gap and entropy sums of one micro-batch (`beacon.train.core.health`)."""
    sampler = torch.full_like(logp, float("nan"))
    for j, row in enumerate(rows):
        if row.sampler_logprobs is not None:
            sampler[j, : len(row.sampler_logprobs)] = torch.tensor(row.sampler_logprobs)
    gap, gap_tokens = logprob_gap_sum(logp, sampler, mask)
    with torch.no_grad():
        entropy, entropy_tokens = entropy_sum(logits, mask)
    return TokenHealth(gap, gap_tokens, entropy, entropy_tokens)


def reduce_update(accelerator: Any, local: UpdateResult) -> UpdateResult:
    """The step's update over all processes: sums of the shares, max of `ratio_max`; the
    timings stay this process's own."""
    sums = torch.tensor(
        [
            local.loss,
            local.sequences,
            local.loss_tokens,
            local.tokens,
            local.padded_tokens,
            local.clip_frac,
            local.ratio_mean,
            local.kl,
            *local.health.as_list(),
            *local.hint.as_list(),
        ],
        dtype=torch.float64,
        device=accelerator.device,
    )
    total = accelerator.reduce(sums, reduction="sum").tolist()
    ratio_max = accelerator.reduce(
        torch.tensor([local.ratio_max], device=accelerator.device), reduction="max"
    )
    return replace(
        local,
        loss=total[0],
        sequences=int(total[1]),
        loss_tokens=int(total[2]),
        tokens=int(total[3]),
        padded_tokens=int(total[4]),
        clip_frac=total[5],
        ratio_mean=total[6],
        kl=total[7],
        ratio_max=float(ratio_max[0]),
        health=TokenHealth.from_list(total[8:12]),
        hint=HintRatio.from_list(total[12:]),
    )


@dataclass(frozen=True)
class GRPOLossOutput:
    """The loss to backpropagate and what to log about it.

    loss: scalar with grad. policy_loss and kl: the two terms (kl before β), aggregated like the
    loss, detached. clip_frac: share of generated tokens whose clipped term is the active one.
    ratio_mean / ratio_max: of r over generated tokens. num_tokens: generated tokens counted.
    """

    loss: Tensor
    policy_loss: Tensor
    kl: Tensor
    clip_frac: Tensor
    ratio_mean: Tensor
    ratio_max: Tensor
    num_tokens: int


def importance_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """r_{i,t} = exp(log π_θ - log π_old) where mask is 1, exactly 1 elsewhere; shapes [B, T].

    For an HGCE response, `logp` is computed with the original prompt and `old_logp` with the
    hinted prompt it was sampled from (`beacon.train.grpo.hints`), position-aligned on the response.
    """
    delta = torch.where(mask.bool(), logp - old_logp, torch.zeros_like(logp))
    return delta.exp()


def k3_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 = exp(ref - logp) - (ref - logp) - 1 per token, an unbiased, non-negative KL estimate."""
    diff = ref_logp - logp
    return diff.exp() - diff - 1.0


def aggregate(
    values: Tensor, mask: Tensor, aggregation: Aggregation, normalizer: float | None = None
) -> Tensor:
    """Masked mean of per-token values [B, T] by `aggregation` (see the module docstring).

    normalizer: divide by this instead of the local number of sequences (sequence_mean) or
    tokens (token_mean), for exact gradient accumulation over micro-batches.
    """
    mask = mask.to(values.dtype)
    if aggregation == "sequence_mean":
        lengths = mask.sum(dim=1).clamp(min=1.0)
        total = ((values * mask).sum(dim=1) / lengths).sum()
        count = values.new_tensor(float(values.shape[0]))
    elif aggregation == "token_mean":
        total = (values * mask).sum()
        count = mask.sum().clamp(min=1.0)
    else:
        raise ValueError(f"rl.loss.aggregation={aggregation!r}; use sequence_mean or token_mean")
    return total / (count if normalizer is None else normalizer)


def grpo_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
    aggregation: Aggregation = "sequence_mean",
    normalizer: float | None = None,
) -> GRPOLossOutput:
    """Clipped GRPO loss over generated tokens (module docstring; DeepSeekMath Eq. 3).

    logp, old_logp, ref_logp: log-probs of the sampled tokens, [B, T] (old and ref detached);
    advantages: [B], one per sequence; mask: [B, T], 1 on generated tokens only. `ref_logp` is
    needed only when kl_coef > 0.
    """
    if kl_coef > 0 and ref_logp is None:
        raise ValueError(
            "rl.loss.kl_coef > 0 needs reference log-probs; pass ref_logp or set kl_coef=0"
        )
    high = clip_eps if clip_eps_high is None else clip_eps_high
    ratio = importance_ratio(logp, old_logp.detach(), mask)
    adv = advantages.to(logp.dtype).unsqueeze(1)
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + high) * adv
    policy = -torch.minimum(unclipped, clipped)
    kl = k3_kl(logp, ref_logp.detach()) if ref_logp is not None else torch.zeros_like(logp)
    per_token = policy + kl_coef * kl if kl_coef > 0 else policy
    loss = aggregate(per_token, mask, aggregation, normalizer)
    with torch.no_grad():
        on = mask.bool()
        num_tokens = int(on.sum().item())
        ratio_on = ratio[on] if num_tokens else ratio.new_ones(1)
        return GRPOLossOutput(
            loss=loss,
            policy_loss=aggregate(policy, mask, aggregation, normalizer),
            kl=aggregate(kl, mask, aggregation, normalizer),
            clip_frac=(clip_cut(ratio, adv, clip_eps, high) & on).sum() / max(num_tokens, 1),
            ratio_mean=ratio_on.mean(),
            ratio_max=ratio_on.max(),
            num_tokens=num_tokens,
        )
