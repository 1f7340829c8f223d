"""Statistics a ReVuE run logs: impact sparsity, reflection coverage, stage counts.

- Impact sparsity (Figure 4, Appendix B.4): the share of total impact carried by the top 20% of
  scored positions, pooled over trajectories (the paper reports 97.6% early in training). We take
  the top ceil(0.2 N) positions by impact rather than the paper's 80th-percentile threshold; the
  two differ only by ties at the threshold.
- Reflection coverage (Table 12): per rollout slot, "complete" (Anchor + Break Point),
  "diagnosis_only", or why the base teacher was used: missing (critic down or unparsable),
  inapplicable, invalid, no_reference (C+ empty), misaligned (re-encoding mismatch).
- Stage counts: the checked diagnoses' stages over groups whose output was accepted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

from beacon.revue.assemble import Assembly
from beacon.revue.weights import high_count

COVERAGE_KEYS = (
    "complete",
    "diagnosis_only",
    "missing",
    "inapplicable",
    "invalid",
    "no_reference",
    "misaligned",
)


def impact_sparsity(impacts: Iterable[Tensor], top_fraction: float = 0.2) -> float | None:
    """Share of pooled total impact in the top `top_fraction` of positions; None if none."""
    pooled = [s.detach().flatten().double().cpu() for s in impacts]
    if not pooled:
        return None
    values = torch.cat(pooled)
    total = values.sum().item()
    if values.numel() == 0 or total <= 0:
        return None
    top = torch.topk(values, high_count(values.numel(), top_fraction)).values
    return top.sum().item() / total


def slot_statuses(assembly: Assembly, aligned: Sequence[bool] | None = None) -> list[str]:
    """Coverage status of each rollout slot of one group; `aligned[i]` from the teacher check."""
    out = []
    for i, reflection in enumerate(assembly.reflections):
        if reflection is None:
            out.append(assembly.status if assembly.status in COVERAGE_KEYS else "missing")
        elif aligned is not None and not aligned[i]:
            out.append("misaligned")
        else:
            out.append("complete" if reflection.complete else "diagnosis_only")
    return out


def coverage_counts(statuses: Iterable[str]) -> dict[str, int]:
    """Counts for every coverage key (zeros included), so logs always have the same columns."""
    counts = Counter(statuses)
    return {key: counts.get(key, 0) for key in COVERAGE_KEYS}


def stage_counts(assemblies: Iterable[Assembly]) -> dict[str, int]:
    """Stages of the accepted (checked, reconciled) diagnoses."""
    counts: Counter[str] = Counter()
    for a in assemblies:
        if a.status in ("complete", "diagnosis_only", "no_reference"):
            counts.update(d.stage for d in a.diagnoses)
    return {s: counts.get(s, 0) for s in ("CORRECT", "ACQUIRE", "READ", "GROUND", "OTHER")}
