"""Inter-annotator agreement: exact agreement, Cohen's kappa and the confusion matrix.

Used to check a critic's stage labels against a human annotator, a rerun of the same critic or
another judge (ReVuE, Appendix B.6 and Table 7). Each function takes two equal-length sequences
of labels, one per item, in the same item order; filtering out invalid or missing labels (the
"valid pairs") is the caller's job.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass


def _check_pairs(name: str, a: Sequence[Hashable], b: Sequence[Hashable]) -> None:
    if len(a) != len(b):
        raise ValueError(
            f"{name} got {len(a)} and {len(b)} labels; pass one label per item from each "
            "rater, in the same item order."
        )
    if not a:
        raise ValueError(f"{name} needs at least one labelled item.")


def agreement(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """Exact agreement p_o: the share of items where both raters gave the same label."""
    _check_pairs("agreement", a, b)
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


def cohens_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """Cohen's κ = (p_o - p_e) / (1 - p_e) for two raters' labels of the same items.

    p_o is the observed share of items where the labels agree; p_e = Σ_c P_a(c)·P_b(c) is the
    agreement expected by chance from each rater's label frequencies. κ is 1 for perfect
    agreement, 0 at chance level, negative below it. When p_e = 1 (both raters give every item
    the same single label) κ is 0/0 and we return NaN: agreement is perfect but uninformative.
    Unweighted: every disagreement counts the same, as in ReVuE's Table 7.
    """
    _check_pairs("cohens_kappa", a, b)
    n = len(a)
    p_observed = agreement(a, b)
    freq_a, freq_b = Counter(a), Counter(b)
    p_expected = sum(freq_a[label] * freq_b[label] for label in freq_a) / (n * n)
    if p_expected == 1.0:
        return float("nan")
    return (p_observed - p_expected) / (1.0 - p_expected)


@dataclass
class ConfusionMatrix:
    """Label counts of rater a (rows) against rater b (columns).

    `counts[i][j]` is the number of items that a labelled `labels[i]` and b labelled `labels[j]`.
    """

    labels: list[Hashable]
    counts: list[list[int]]

    @property
    def total(self) -> int:
        """Pairs counted in the matrix."""
        return sum(map(sum, self.counts))

    @property
    def agreed(self) -> int:
        """Pairs on the diagonal, where both sources gave the same label."""
        return sum(self.counts[i][i] for i in range(len(self.labels)))


def confusion_matrix(
    a: Sequence[Hashable], b: Sequence[Hashable], labels: Sequence[Hashable] = ()
) -> ConfusionMatrix:
    """Counts of (a, b) label pairs; rows and columns follow `labels`, then any others seen."""
    _check_pairs("confusion_matrix", a, b)
    order = list(labels)
    for label in [*a, *b]:
        if label not in order:
            order.append(label)
    index = {label: i for i, label in enumerate(order)}
    counts = [[0] * len(order) for _ in order]
    for x, y in zip(a, b, strict=True):
        counts[index[x]][index[y]] += 1
    return ConfusionMatrix(labels=order, counts=counts)
