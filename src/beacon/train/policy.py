"""One GRPO policy update over a step's kept responses: old log-probs, clipped loss, backward.

Each kept response becomes a `PolicyRow`: its training sequence (the un-hinted prompt + the
response ids, token-exact, via `beacon.train.encode`) and, for an HGCE response, the sequence it
was sampled from (hinted prompt + response).

Old log-probs are recomputed under the training forward at T = 1, never taken from the sampler
(docs/rl.md §5):

1. un-hinted rows: one update per rollout batch means π_old is the current policy, so the
   training forward's own log-probs, detached, *are* the recomputed old log-probs (exact, and
   no second forward); the ratio is 1 and the clip inactive, as the feasibility study saw;
2. HGCE rows: a no-grad forward over the hinted ids before any gradient, moved onto the
   un-hinted positions with `align_old_logprobs`, so r_t = π_θ(o_t | q, o_<t) /
   π_old(o_t | q + hint, o_<t) (beacon.md §4 step 4).

The loss is `grpo_loss` with `normalizer` = the step's sequence count (sequence_mean) or
generated-token count (token_mean), so micro-batch losses add up to the step's loss.

What is not covered: several processes (the recipe refuses them), several updates per batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from beacon.rl import (
    LossConfig,
    aggregate,
    align_old_logprobs,
    grpo_loss,
    k3_kl,
    token_logprobs,
    training_sequence,
)
from beacon.train.collate import IGNORE_INDEX, ModelBatch, plan_buckets
from beacon.train.encode import EncodedTrajectory, encode_trajectory
from beacon.types import Trajectory

Collate = Callable[[list[EncodedTrajectory]], ModelBatch]


@dataclass
class PolicyRow:
    """One kept response: what trains, what it was sampled after (HGCE only), its advantage."""

    encoded: EncodedTrajectory
    sampling: EncodedTrajectory | None
    advantage: float


@dataclass
class UpdateResult:
    """Sums and token-weighted means of one update (0 everywhere when nothing trained)."""

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


def policy_rows(
    trajectories: Sequence[Trajectory], advantages: Sequence[float], tokenizer: Any
) -> list[PolicyRow]:
    """Rows of the kept responses; a hinted response also keeps its hinted sampling layout."""
    rows = []
    for traj, adv in zip(trajectories, advantages, strict=True):
        encoded = encode_trajectory(traj, tokenizer)
        sampling = None
        if traj.original_prompt is not None:
            sampling = encode_trajectory(replace(traj, original_prompt=None), tokenizer)
        rows.append(PolicyRow(encoded, sampling, float(adv)))
    return rows


def hinted_old_logprobs(
    model: torch.nn.Module,
    rows: Sequence[PolicyRow],
    trajectories: Sequence[Trajectory],
    collate_fn: Collate,
    device: torch.device,
) -> dict[int, torch.Tensor]:
    """Row index -> old log-probs [L] of an HGCE row: forward over the hinted ids, aligned onto
    the un-hinted layout (zeros on the prompt)."""
    out = {}
    with torch.no_grad():
        for i, row in enumerate(rows):
            if row.sampling is None:
                continue
            batch = collate_fn([row.sampling]).to(device)
            logits = model(**batch.model_inputs()).logits
            logp = token_logprobs(logits.float(), batch.input_ids)[0]
            sequence = training_sequence(trajectories[i])
            assert sequence.token_ids == row.encoded.input_ids, "encode and rl layouts differ"
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
) -> UpdateResult:
    """Accumulate the gradient of the clipped GRPO loss over `rows` (no optimizer step)."""
    start = time.perf_counter()
    result = UpdateResult(sequences=len(rows))
    if not rows:
        return result
    result.loss_tokens = sum(r.encoded.num_loss_tokens for r in rows)
    normalizer = len(rows) if loss_cfg.aggregation == "sequence_mean" else result.loss_tokens
    plan = plan_buckets([len(r.encoded) for r in rows], max_tokens_per_microbatch)
    for indices in plan:
        batch = collate_fn([rows[i].encoded for i in indices]).to(accelerator.device)
        logp = token_logprobs(model(**batch.model_inputs()).logits.float(), batch.input_ids)
        old = logp.detach().clone()
        for j, i in enumerate(indices):
            if i in old_hinted:
                old[j, : old_hinted[i].shape[0]] = old_hinted[i].to(old.device)
        mask = (batch.labels != IGNORE_INDEX).to(logp.dtype)
        adv = torch.tensor([rows[i].advantage for i in indices], device=logp.device)
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
        accelerator.backward(out.loss)
        weight = out.num_tokens / max(result.loss_tokens, 1)
        result.loss += float(out.loss.detach())
        result.clip_frac += float(out.clip_frac) * weight
        result.ratio_mean += float(out.ratio_mean) * weight
        kl = k3_kl(logp.detach(), old)
        result.kl += float(aggregate(kl, mask, "token_mean", normalizer=result.loss_tokens))
        result.ratio_max = max(result.ratio_max, float(out.ratio_max))
        result.tokens += batch.num_tokens
        result.padded_tokens += batch.input_ids.numel()
        result.microbatches += 1
    result.update_s = time.perf_counter() - start
    return result
