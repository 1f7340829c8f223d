"""Inter-annotator agreement: Cohen's kappa (used for human stage labels vs the critic)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence


def cohens_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """Cohen's κ = (p_o - p_e) / (1 - p_e) for two raters' labels of the same items.

    p_o is the observed share of items where the labels agree; p_e = Σ_c P_a(c)·P_b(c) is the
    agreement expected by chance from each rater's label frequencies. κ is 1 for perfect
    agreement, 0 at chance level, negative below it. When p_e = 1 (both raters give every item
    the same single label) κ is 0/0 and we return NaN: agreement is perfect but uninformative.
    """
    if len(a) != len(b):
        raise ValueError(
            f"cohens_kappa got {len(a)} and {len(b)} labels; pass one label per item from each "
            "rater, in the same item order."
        )
    if not a:
        raise ValueError("cohens_kappa needs at least one labelled item.")
    n = len(a)
    p_observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    freq_a, freq_b = Counter(a), Counter(b)
    p_expected = sum(freq_a[label] * freq_b[label] for label in freq_a) / (n * n)
    if p_expected == 1.0:
        return float("nan")
    return (p_observed - p_expected) / (1.0 - p_expected)
