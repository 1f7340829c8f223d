"""Impact sparsity, reflection coverage and stage counts."""

from __future__ import annotations

import torch

from beacon.train.opd.assemble import (
    check_and_assemble,
    coverage_counts,
    impact_sparsity,
    slot_statuses,
    stage_counts,
)
from beacon.train.opd.critic_schema import observed_states

from .helpers import critic_output, make_trajectory


def test_impact_sparsity_pools_trajectories() -> None:
    # 10 positions; the top 2 carry 8 of 10
    impacts = [torch.tensor([4.0, 0.5, 0.5]), torch.tensor([4.0, 0.25, 0.25, 0.25, 0.25, 0, 0])]
    assert abs(impact_sparsity(impacts) - 0.8) < 1e-12
    assert impact_sparsity([torch.zeros(4)]) is None
    assert impact_sparsity([]) is None


def test_coverage_and_stages() -> None:
    group = [make_trajectory([["k1"]]), make_trajectory([], answer="B")]
    states = observed_states(group)
    shown = frozenset(states.image_keys)
    complete = check_and_assemble(
        critic_output({"R1_S1": ["R1_S1_IMG1"]}, ["CORRECT", "ACQUIRE"]),
        states,
        [True, False],
        shown,
    )
    diag = check_and_assemble(
        critic_output({}, ["ACQUIRE", "OTHER"]), states, [False, False], shown
    )
    missing = check_and_assemble(None, states, [True, False], shown)
    statuses = slot_statuses(complete, aligned=[True, False]) + slot_statuses(diag)
    statuses += slot_statuses(missing)
    counts = coverage_counts(statuses)
    assert counts["complete"] == 1 and counts["misaligned"] == 1
    assert counts["diagnosis_only"] == 2 and counts["missing"] == 2 and counts["invalid"] == 0
    stages = stage_counts([complete, diag, missing])
    assert stages == {"CORRECT": 1, "ACQUIRE": 2, "READ": 0, "GROUND": 0, "OTHER": 1}
