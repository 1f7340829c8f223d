"""Evaluation metrics: pure functions over ``samples.jsonl`` records, no I/O.

- `adaptivity`: MA, TE (overall / easy / hard), gain, harm, Δ_TE, Text-Retain over per-item
  records (beacon.md §1); `pair_modes` builds those records from sample records.
- `mode_stats`: accuracy, tool-call rate, calls per episode, response length, accuracy with /
  without tool, unparsed and error rates of one mode.
- `summarize`: all of it per benchmark, per category and overall, with bootstrap CIs.
- `agreement`, `cohens_kappa`, `confusion_matrix`: agreement between two annotators.

Definitions, K-sample aggregation and a worked example: docs/metrics.md.
"""

from beacon.metrics.adaptivity import (
    ItemOutcomes,
    adaptivity,
    gain_harm,
    item_outcomes,
    mode_adaptiveness,
    text_retain,
    tool_effect,
)
from beacon.metrics.agreement import ConfusionMatrix, agreement, cohens_kappa, confusion_matrix
from beacon.metrics.bootstrap import percentile_ci, resample_weights, two_level_weights
from beacon.metrics.records import MODE_STATS, RATE_STATS, dedupe, mode_stats, pair_modes
from beacon.metrics.summary import Section, Summary, jsonable, summarize

__all__ = [
    "MODE_STATS",
    "RATE_STATS",
    "ConfusionMatrix",
    "ItemOutcomes",
    "Section",
    "Summary",
    "adaptivity",
    "agreement",
    "cohens_kappa",
    "confusion_matrix",
    "dedupe",
    "gain_harm",
    "item_outcomes",
    "jsonable",
    "mode_adaptiveness",
    "mode_stats",
    "pair_modes",
    "percentile_ci",
    "resample_weights",
    "summarize",
    "text_retain",
    "tool_effect",
    "two_level_weights",
]
