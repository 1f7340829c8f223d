"""Label sources for `beacon critic agreement`, and the pairwise comparison of them.

A source is one rater's stage per rollout: the human labels or the critic labels of an
annotation JSONL (`FILE:label`, `FILE:critic`; a bare `FILE` takes human labels when it has any,
else critic labels), a critic JSONL (rows with a top-level `stage`, or per-group
`rollout_diagnoses`), or a label log written by the page (one source per annotator, last write
wins). A rollout's key is its `id`, else `group_id/rollout_id`.

Valid pairs (ReVuE Table 7's n) are rollouts both sources gave one of the five stages; SKIP,
a missing label or an unknown stage leaves the pair out. "Incorrect" restricts to rollouts whose
answer was wrong, by the `correct` field of either source.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from beacon.annotate.records import STAGES
from beacon.jsonl import read_jsonl
from beacon.metrics import ConfusionMatrix, agreement, cohens_kappa, confusion_matrix

FIELDS = ("label", "critic", "stage")


@dataclass
class LabelSource:
    """One rater's labels: `stages[key]` as written (may be SKIP or None), `correct[key]`."""

    name: str
    stages: dict[str, str | None] = field(default_factory=dict)
    correct: dict[str, bool] = field(default_factory=dict)


@dataclass
class Agreement:
    """Agreement of two sources over their valid pairs."""

    n: int
    agreement: float
    kappa: float
    matrix: ConfusionMatrix


@dataclass
class PairResult:
    """Sources a and b compared overall and on incorrect rollouts (None: nothing to compare)."""

    a: str
    b: str
    shared: int
    overall: Agreement | None
    incorrect: Agreement | None


def row_key(row: dict[str, Any]) -> str:
    """The key a label is matched by across sources: the row's `id`, else `group_id/rollout_id`."""
    if "id" in row:
        return str(row["id"])
    return f"{row['group_id']}/{row['rollout_id']}"


def _read(path: Path) -> list[dict[str, Any]]:
    rows = []
    for number, row in enumerate(read_jsonl(path, whole=True), start=1):
        if not isinstance(row, dict):
            raise ValueError(f"{path} record {number} is not a JSON object")
        rows.extend(_expand(row))
    return rows


def _expand(row: dict[str, Any]) -> list[dict[str, Any]]:
    """A per-group critic output becomes one row per rollout diagnosis."""
    if "rollout_diagnoses" not in row:
        return [row]
    return [{"group_id": row["group_id"], **d} for d in row["rollout_diagnoses"]]


def _stage(row: dict[str, Any], which: str) -> str | None:
    value = row.get(which) if which != "stage" else row
    return value.get("stage") if isinstance(value, dict) else None


def load_source(spec: str) -> list[LabelSource]:
    """The source(s) named by `spec`: `FILE`, `FILE:label`, `FILE:critic` or `FILE:stage`."""
    path_text, _, which = spec.rpartition(":")
    if which not in FIELDS:
        path_text, which = spec, ""
    path = Path(path_text)
    if not path.exists():
        raise FileNotFoundError(f"label source {spec!r}: no file {path}")
    rows = _read(path)
    if not rows:
        raise ValueError(f"label source {spec!r} has no rows")
    if not which and all("annotator" in r and "stage" in r and "id" in r for r in rows):
        return _per_annotator(spec, rows)
    which = which or next((f for f in FIELDS if any(_stage(r, f) for r in rows)), "")
    if not which:
        raise ValueError(
            f"label source {spec!r} has no stage labels: expected rows with label.stage, "
            "critic.stage or a top-level stage (docs/annotate.md)."
        )
    source = LabelSource(name=spec if ":" in spec else f"{spec}:{which}")
    for row in rows:
        key = row_key(row)
        source.stages[key] = _stage(row, which)
        if isinstance(row.get("correct"), bool):
            source.correct[key] = row["correct"]
    return [source]


def _per_annotator(spec: str, rows: list[dict[str, Any]]) -> list[LabelSource]:
    sources: dict[str, LabelSource] = {}
    for row in rows:  # file order: the last write per (annotator, id) wins
        who = row["annotator"] or "?"
        source = sources.setdefault(who, LabelSource(name=f"{spec}@{who}"))
        source.stages[str(row["id"])] = row["stage"]
    return list(sources.values())


def load_sources(specs: list[str]) -> list[LabelSource]:
    """The label sources named by `specs` (`file.jsonl:field`); at least two, since agreement needs
    a pair."""
    sources = [s for spec in specs for s in load_source(spec)]
    if len(sources) < 2:
        raise ValueError(
            f"got {len(sources)} label source; pass at least two, e.g. "
            "`beacon critic agreement labelled.jsonl:label labelled.jsonl:critic`."
        )
    return sources


def _agree(pairs: list[tuple[str, str]]) -> Agreement | None:
    if not pairs:
        return None
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    return Agreement(len(a), agreement(a, b), cohens_kappa(a, b), confusion_matrix(a, b, STAGES))


def compare(a: LabelSource, b: LabelSource) -> PairResult:
    """Agreement of a and b over their valid pairs, overall and on incorrect rollouts."""
    shared = [k for k in a.stages if k in b.stages]
    valid = [k for k in shared if a.stages[k] in STAGES and b.stages[k] in STAGES]
    wrong = [k for k in valid if a.correct.get(k, b.correct.get(k)) is False]
    return PairResult(
        a=a.name,
        b=b.name,
        shared=len(shared),
        overall=_agree([(a.stages[k], b.stages[k]) for k in valid]),
        incorrect=_agree([(a.stages[k], b.stages[k]) for k in wrong]),
    )


def compare_all(sources: list[LabelSource]) -> list[PairResult]:
    """`compare` for every pair of sources, in the order given."""
    return [compare(a, b) for a, b in itertools.combinations(sources, 2)]


def _line(title: str, result: Agreement | None) -> str:
    if result is None:
        return f"  {title:<10} no valid pairs"
    kappa = "nan (one label only)" if math.isnan(result.kappa) else f"{result.kappa:.3f}"
    return f"  {title:<10} n={result.n:<5} agreement {100 * result.agreement:6.2f}%  κ {kappa}"


def _matrix(m: ConfusionMatrix) -> list[str]:
    width = max(len(str(x)) for x in m.labels) + 1
    lines = ["  confusion (rows: first source, columns: second):"]
    lines.append("    " + " " * width + "".join(f"{x:>{width}}" for x in m.labels))
    for label, row in zip(m.labels, m.counts, strict=True):
        lines.append(f"    {label:<{width}}" + "".join(f"{c:>{width}}" for c in row))
    return lines


def format_report(results: list[PairResult]) -> str:
    """A plain-text table per pair of sources."""
    out = []
    for r in results:
        out.append(f"{r.a}  vs  {r.b}   ({r.shared} shared rollouts)")
        out.append(_line("overall", r.overall))
        out.append(_line("incorrect", r.incorrect))
        if r.overall is not None:
            out += _matrix(r.overall.matrix)
        out.append("")
    return "\n".join(out)


def report_json(results: list[PairResult]) -> str:
    """The results as JSON, with NaN (kappa of a single-label pair) written as null so the output is
    valid JSON."""

    def clean(value: Any) -> Any:
        if isinstance(value, float) and math.isnan(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    return json.dumps([clean(asdict(r)) for r in results], indent=2, ensure_ascii=False)
