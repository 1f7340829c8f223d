"""The benchmark contract and the registry every benchmark module registers into.

A benchmark is one small subclass of `Benchmark`: class attributes name its hub source
(`hub`, `hub_config`, `revision`, `split`), `to_sample` maps one published row to a
`beacon.types.Sample`, and the rest (prompt, scoring, per-record meta, benchmark-specific
aggregates) has defaults that most benchmarks keep. Registration follows lm-eval's
`@register_task` pattern: `@register` on the class, lookup by name with `get_benchmark`.

`load(path=...)` reads a local file or folder in the published format; without a path it
reads the hub dataset through `datasets.load_dataset` (hub name + pinned revision). Images are
kept as they come (encoded bytes, file paths); nothing is decoded while loading, so a
multi-gigabyte benchmark streams in constant memory.

A row is data, and a path in it names a file on this machine: every image path must resolve
under the dataset root (`data_root`) and be a regular file, or the row is skipped; rows that a
loader refuses (`BadRow`, `beacon.files.FileRefused`) are skipped and counted by reason in
`skipped`, logged once per reason and in total, never a dead load.
"""

from __future__ import annotations

import difflib
import logging
import random
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from beacon.benchmarks.options import format_options, shuffle_options
from beacon.benchmarks.tables import (
    BadRow,
    dataset_root,
    hub_rows,
    hub_snapshot,
    read_table,
    with_fields,
)
from beacon.files import FileRefused, path_under
from beacon.types import Sample
from beacon.verify import verify

logger = logging.getLogger(__name__)

Row = Mapping[str, Any]


class Benchmark:
    """One benchmark: where its rows live, how a row becomes a `Sample`, how to score it.

    Subclasses set the class attributes and implement `to_sample`; they override
    `read_local` / `read_hub` when the published layout is not a single table, `prompt` when
    the question needs more than "question + lettered options", and `record_meta` /
    `aggregate` for paired or circular metrics.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    hub: ClassVar[str | None] = None  # Hugging Face dataset repo, None for built-in benchmarks
    hub_config: ClassVar[str | None] = None
    revision: ClassVar[str | None] = None  # commit sha where known, else "main"
    split: ClassVar[str | None] = None
    categories: ClassVar[tuple[str, ...]] = ()
    shuffle: ClassVar[bool] = False  # shuffle options with the load seed (biased answer position)
    image_columns: ClassVar[tuple[str, ...]] = ("image",)  # hub columns to keep undecoded
    sampled: ClassVar[bool] = False  # `limit` draws a seeded subset instead of the first rows

    def __init__(self) -> None:
        self.skipped: Counter[str] = Counter()  # rows the last `load` skipped, by reason

    def load(
        self, path: str | Path | None = None, limit: int | None = None, seed: int = 0
    ) -> Iterator[Sample]:
        """Yield the benchmark's samples in published order, at most `limit` of them.

        `path` is a local file or folder in the published format; None reads the hub.
        `seed` drives option shuffling (benchmarks with `shuffle = True`), generation
        (`synth`) and, for benchmarks with `sampled = True` (GameQA: 15,047 rows in game
        order), which `limit` rows are taken; the same seed gives the same samples.
        """
        if limit is not None and limit < 0:
            raise ValueError(f"limit={limit} is negative; pass None for all samples or N >= 0")
        if path is not None:
            root: Path | None = self.data_root(Path(path))
            rows = self.read_local(Path(path))
        else:
            root, rows = None, self.read_hub()
        positioned: Iterable[tuple[int, Row]] = enumerate(rows)
        if self.sampled and limit is not None:
            positioned = seeded_subset(list(positioned), limit, seed)
        self.skipped = Counter()
        count = 0
        try:
            for position, row in positioned:
                if limit is not None and count >= limit:
                    return
                sample = self._sample({"_row": position, "_root": root, **row})
                if sample is None:
                    continue
                sample.benchmark = self.name
                if self.shuffle and sample.options:
                    sample = shuffle_options(sample, seed)
                count += 1
                yield sample
        finally:
            if self.skipped:
                reasons = ", ".join(f"{n} {why}" for why, n in sorted(self.skipped.items()))
                logger.warning("%s: skipped %d rows (%s)", self.name, self.skipped.total(), reasons)

    def _sample(self, row: Row) -> Sample | None:
        """`to_sample(row)` with its image paths checked under the row's `_root`; a refused row
        is counted in `skipped` (the first of each reason logged with its message) and gives None.
        """
        try:
            sample = self.to_sample(row)
            if sample is not None:
                for image in sample.images:
                    if isinstance(image, Path):
                        _image_under(image, row.get("_root"))
        except (BadRow, FileRefused) as exc:
            if not self.skipped[exc.reason]:
                logger.warning("%s: skipping row %s: %s", self.name, row["_row"], exc)
            self.skipped[exc.reason] += 1
            return None
        return sample

    def read_hub(self) -> Iterable[Row]:
        """Rows from the hub dataset (downloads on first use, then the `datasets` cache)."""
        if self.hub is None:
            raise ValueError(f"benchmark {self.name!r} has no hub dataset; pass a local path")
        return hub_rows(
            self.hub,
            config=self.hub_config,
            revision=self.revision,
            split=self.split,
            image_columns=self.image_columns,
        )

    def read_snapshot(self, files: Sequence[str] | None = None) -> Iterable[Row]:
        """`read_local` over the hub repo's snapshot (releases that are files, not a table), its
        rows rooted in the repo's cache folder (`data_root`); `files` limits the download."""
        if self.hub is None:
            raise ValueError(f"benchmark {self.name!r} has no hub dataset; pass a local path")
        folder = hub_snapshot(self.hub, self.revision, files)
        return with_fields(self.read_local(folder), _root=self.data_root(folder))

    def read_local(self, path: Path) -> Iterable[Row]:
        """Rows from a local file in the published format (json, jsonl, parquet, tsv, xlsx),
        or a folder holding one such file or the parquet shards of the split."""
        return read_table(path, split=self.split)

    def data_root(self, path: Path) -> Path:
        """The folder the rows of `path` may name files under (`tables.dataset_root`: the folder
        given, a file's folder, a hub snapshot's repo); a layout with images beside it widens it."""
        return dataset_root(path)

    def to_sample(self, row: Row) -> Sample | None:
        """Map one published row to a Sample; None skips the row (e.g. another subset).

        `row["_row"]` is the row's position in the source, for benchmarks without an id column.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement to_sample")

    def prompt(self, sample: Sample) -> str:
        """The question text given to the model: question, then one line per option.

        The answer-format instruction ("answer with the letter", answer tags) is not added
        here: the agent format adds it, so it matches the format the model was trained on.
        """
        if not sample.options:
            return sample.question
        return f"{sample.question}\n{format_options(sample.options)}"

    def score(self, response: str, sample: Sample, *, judge: Any = None) -> Any:
        """Verdict for `response` (a `beacon.verify.Verdict`); scoring hints sit in metadata."""
        return verify(response, sample, judge=judge)

    def record_meta(self, sample: Sample) -> dict[str, Any]:
        """Small JSON-safe dict copied into each eval record (group ids for paired metrics)."""
        return {}

    def aggregate(self, records: list[Mapping[str, Any]]) -> dict[str, float]:
        """Benchmark-specific metrics over the records of one mode; {} when there are none."""
        return {}


def _image_under(image: Path, root: Path | None) -> None:
    """A row's image path must resolve under its dataset root: a hub table gives none, so its
    rows may carry image bytes but never a path."""
    if root is None:
        raise FileRefused(
            "outside_root",
            f"the row names the file {image} but the hub data has no folder to hold it; "
            "pass a local copy with --data NAME=PATH",
        )
    path_under(image, root)


def seeded_subset(rows: list[tuple[int, Row]], limit: int, seed: int) -> list[tuple[int, Row]]:
    """`limit` of the rows drawn with `random.Random(f"beacon-subset:{seed}")`, in source order.

    The draw depends only on (seed, number of rows), so a run and its resume take the same rows.
    """
    chosen = random.Random(f"beacon-subset:{seed}").sample(range(len(rows)), min(limit, len(rows)))
    return [rows[i] for i in sorted(chosen)]


_REGISTRY: dict[str, type[Benchmark]] = {}


def generated_indices(name: str, path: str | Path | None, limit: int | None, default: int) -> range:
    """Item indices of a generated benchmark (`synth`, `synth_demo`): `limit` of them, `default`
    when None; a `path` or a negative limit is a clear error."""
    if path is not None:
        raise ValueError(f"{name} is generated, not read from a file; drop --path / path=")
    if limit is not None and limit < 0:
        raise ValueError(f"limit={limit} is negative; pass None for all samples or N >= 0")
    return range(default if limit is None else limit)


class UnknownBenchmarkError(KeyError):
    """No benchmark is registered under the requested name."""

    def __str__(self) -> str:  # KeyError would print the message inside quotes
        return str(self.args[0])


def _normalize(name: str) -> str:
    return name.strip().lower().replace("-", "_")


def register(cls: type[Benchmark]) -> type[Benchmark]:
    """Class decorator: make `cls` available to `get_benchmark(cls.name)`."""
    key = _normalize(cls.name)
    if not key:
        raise ValueError(f"{cls.__name__} has no name; set the class attribute `name`")
    if key in _REGISTRY and _REGISTRY[key] is not cls:
        raise ValueError(f"benchmark name {cls.name!r} is registered twice")
    _REGISTRY[key] = cls
    return cls


def get_benchmark(name: str) -> Benchmark:
    """The registered benchmark called `name` (case-insensitive, '-' and '_' alike)."""
    key = _normalize(name)
    if key not in _REGISTRY:
        known = sorted(_REGISTRY)
        close = difflib.get_close_matches(key, known, n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise UnknownBenchmarkError(
            f"unknown benchmark {name!r}.{hint} Known benchmarks: {', '.join(known)} "
            "(see `beacon bench list`)."
        )
    return _REGISTRY[key]()


def list_benchmarks() -> list[str]:
    """Names of all registered benchmarks, sorted."""
    return sorted(_REGISTRY)
