"""Reading benchmark rows: hub datasets, local tables in the published formats, image cells.

Everything here streams: local parquet in small pyarrow batches (no Arrow cache copy of a
multi-gigabyte file, no whole row group in memory), TSV/CSV through pandas in small chunks with
every cell kept as a string (HR-Bench's TSV carries a base64 image of several MB per row), JSON
Lines line by line. Hub datasets go through `datasets.load_dataset` (memory-mapped Arrow cache).
Image cells are turned into something `beacon.images.load_image` can open later (bytes or a
path), never into decoded pixels. A path a row names must stay under the dataset root
(`dataset_root`, checked by `Benchmark.load`); zip members are unpacked in bounded chunks up to a
cap (`ZipImages`); a row that breaks either rule is skipped and counted, never a dead load.
"""

from __future__ import annotations

import ast
import base64
import binascii
import contextlib
import json
import math
import socket
import urllib.parse
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from beacon.errors import UserError
from beacon.files import MAX_FILE_BYTES, FileRefused, read_capped
from beacon.jsonl import read_jsonl
from beacon.types import ImageSource


class BadRow(ValueError):
    """A row a benchmark cannot make a sample of; `Benchmark.load` skips it and counts `reason`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


TABLE_SUFFIXES = (".json", ".jsonl", ".parquet", ".tsv", ".csv", ".xlsx")
_BATCH_ROWS = 16  # rows per parquet batch / CSV chunk: bounds memory when rows hold large images


def hub_rows(
    hub: str,
    *,
    config: str | None,
    revision: str | None,
    split: str | None,
    image_columns: Sequence[str] = ("image",),
) -> Iterable[Mapping[str, Any]]:
    """Rows of a hub dataset split, with image columns left encoded ({"bytes", "path"})."""
    import datasets

    with _offline_is_one_line(hub):
        dataset = datasets.load_dataset(hub, config, revision=revision, split=split)
    for column in image_columns:
        if column in dataset.column_names and isinstance(dataset.features[column], datasets.Image):
            dataset = dataset.cast_column(column, datasets.Image(decode=False))
    return dataset


def read_table(path: Path, split: str | None = None) -> Iterator[Mapping[str, Any]]:
    """Rows of one local file, by suffix: .json, .jsonl, .parquet, .tsv, .csv or .xlsx.

    A .json file may hold a list of rows, an object keyed by id (MathVista's testmini.json;
    the key is added as "_key"), or an object with a "data" list (InfographicVQA's release).
    A folder holding exactly one such file stands for that file; a folder of parquet shards
    (a hub split such as `test-00000-of-00003.parquet`, ...) stands for their rows in name order;
    with `split`, only the shards named `<split>-*` when the folder holds several splits. A
    folder with no table but a `data/` folder (a hub repo copied with `huggingface-cli download
    --local-dir`, whose parquet sits under `data/`) stands for that folder.
    """
    if path.is_dir():
        if not _tables(path) and (path / "data").is_dir():
            path = path / "data"
        shards = _parquet_shards(path, split)
        if shards:
            return (row for shard in shards for row in _parquet_rows(shard))
        path = _only_table(path)
    if not path.exists():
        raise FileNotFoundError(f"benchmark file {path} does not exist")
    if not path.is_file():
        raise ValueError(f"benchmark file {path} is not a regular file; pass the data file itself")
    suffix = path.suffix.lower()
    if suffix == ".json":
        return _json_rows(path)
    if suffix == ".jsonl":
        return _jsonl_rows(path)
    if suffix == ".parquet":
        return _parquet_rows(path)
    if suffix in (".tsv", ".csv"):
        return _delimited_rows(path, "\t" if suffix == ".tsv" else ",")
    if suffix == ".xlsx":
        return _excel_rows(path)
    raise ValueError(f"cannot read {path}: unknown suffix {suffix!r}; use {TABLE_SUFFIXES}")


def _parquet_shards(folder: Path, split: str | None) -> list[Path]:
    """The folder's tables when every one of them is a parquet file (shards of splits)."""
    tables = _tables(folder)
    if not tables or any(p.suffix.lower() != ".parquet" for p in tables):
        return []
    of_split = [p for p in tables if split is not None and p.name.startswith(f"{split}-")]
    return of_split or tables


def _tables(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in TABLE_SUFFIXES)


def _only_table(folder: Path) -> Path:
    tables = _tables(folder)
    if len(tables) != 1:
        found = ", ".join(p.name for p in tables) or "none"
        raise ValueError(
            f"{folder} should hold one data file ({', '.join(TABLE_SUFFIXES)}), found: {found}; "
            "pass the file itself"
        )
    return tables[0]


def _json_rows(path: Path) -> Iterator[Mapping[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, list):
        yield from data
    elif isinstance(data, dict) and isinstance(data.get("data"), list):
        yield from data["data"]
    elif isinstance(data, dict):
        for key, row in data.items():
            yield {"_key": key, **row}
    else:
        raise ValueError(f"{path}: expected a JSON list or object of rows, got {type(data)}")


def _jsonl_rows(path: Path) -> Iterator[Mapping[str, Any]]:
    return read_jsonl(path, whole=True)


def _parquet_rows(path: Path) -> Iterator[Mapping[str, Any]]:
    """Row batches straight from pyarrow, without pre-buffering a whole row group.

    `datasets`' streaming parquet reader holds a full row group in memory: 1.25 GB peak for a
    400 MB single-row-group file of base64 images, against 0.13 GB here. `datasets` Image
    columns come back as their stored {"bytes", "path"} structs, i.e. still encoded.
    """
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path, memory_map=True, pre_buffer=False)
    for batch in parquet.iter_batches(batch_size=_BATCH_ROWS, use_threads=False):
        yield from batch.to_pylist()


def _delimited_rows(path: Path, sep: str) -> Iterator[Mapping[str, Any]]:
    import pandas as pd

    chunks = pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False, chunksize=_BATCH_ROWS)
    for chunk in chunks:
        yield from chunk.to_dict(orient="records")


def _excel_rows(path: Path) -> Iterator[Mapping[str, Any]]:
    import pandas as pd

    frame = pd.read_excel(path, dtype=str, keep_default_na=False)
    yield from frame.to_dict(orient="records")


def find_file(folder: Path, names: Sequence[str]) -> Path:
    """The first of `names` that exists in `folder`, or a clear error listing what was tried."""
    for name in names:
        if (folder / name).exists():
            return folder / name
    raise FileNotFoundError(f"none of {', '.join(names)} found in {folder}")


def is_missing(value: Any) -> bool:
    """True for None, NaN and empty/"nan"/"none" strings (how CSV exports write a gap)."""
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    return isinstance(value, str) and value.strip().lower() in ("", "nan", "none", "null")


def text(value: Any) -> str:
    """A cell as a stripped string; missing cells become ""."""
    return "" if is_missing(value) else str(value).strip()


_MAX_LITERAL_CHARS = 1 << 20


def literal_list(cell: str) -> list[Any] | None:
    """The list a cell writes as text: JSON, or a Python literal as `str(list)` and CSV exports
    write it ("['a', 'b']"), read with `ast.literal_eval` (literals only, no code runs). None for
    text that is not a list literal, or longer than 1 MiB (parsing allocates with the input)."""
    stripped = cell.strip()
    if not (stripped.startswith("[") and stripped.endswith("]")):
        return None
    if len(stripped) > _MAX_LITERAL_CHARS:
        return None
    try:
        parsed = json.loads(stripped)
    except (ValueError, RecursionError):
        try:
            parsed = ast.literal_eval(stripped)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
    return parsed if isinstance(parsed, list) else None


def image_source(
    value: Any, base: Path | None = None, *, encoded: bool = False
) -> ImageSource | None:
    """An image cell as bytes or a path, undecoded; None when the cell is empty.

    Handles `datasets` Image cells ({"bytes", "path"}), raw bytes, base64 strings
    (`encoded=True`: the TSV/parquet exports of VLMEvalKit, HR-Bench, TreeBench) and file
    names relative to `base`. Base64 is turned into the encoded image bytes, not pixels.
    """
    if is_missing(value):
        return None
    if isinstance(value, Mapping):
        if value.get("bytes"):
            return bytes(value["bytes"])
        return image_source(value.get("path"), base)
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, str) and encoded:
        return _base64_bytes(value)
    if isinstance(value, str):
        path = Path(value)
        return base / path if base is not None and not path.is_absolute() else path
    return value  # already a PIL image


def _base64_bytes(value: str) -> bytes:
    try:
        return base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(
            f"image cell of {len(value)} characters is not valid base64: {exc}"
        ) from exc


def image_list(values: Iterable[Any], base: Path | None = None) -> list[ImageSource]:
    """`image_source` over several cells, dropping empty ones."""
    images = (image_source(value, base) for value in values)
    return [image for image in images if image is not None]


def with_fields(rows: Iterable[Mapping[str, Any]], **fields: Any) -> Iterator[Mapping[str, Any]]:
    """Rows with extra keys (e.g. `_base`, the folder image paths are relative to)."""
    for row in rows:
        yield {**row, **fields}


def resolve_relative(name: str, anchors: Sequence[Path]) -> Path:
    """The file a release-relative path names, tolerating a prefix the release did not keep.

    Releases write image paths relative to a folder a download does not reproduce:
    VisualProbe's val.json says "VisualProbe_Easy/data/1.jpg" while a snapshot holds
    "<snapshot>/data/1.jpg"; VisuLogic and HallusionBench prefix "./". Each anchor is tried with
    the whole path, then with leading folders dropped one at a time; the first file that exists
    wins. When none exists the path joined to the first anchor is returned, so the error that
    follows names where the file was expected.
    """
    parts = Path(name.removeprefix("./")).parts
    for start in range(len(parts)):
        for anchor in anchors:
            candidate = anchor.joinpath(*parts[start:])
            if candidate.is_file():
                return candidate
    return anchors[0].joinpath(*parts)


def dataset_root(path: Path) -> Path:
    """The folder a dataset's rows may name files under: the folder given, or a file's folder.

    A hub snapshot (`.../datasets--org--name/snapshots/<rev>/`) holds symlinks into the repo's
    `blobs/`, so inside one the root is the repo's cache folder.
    """
    folder = path if path.is_dir() else path.parent
    for above in (folder, *folder.parents):
        if above.parent.name == "snapshots" and above.parent.parent.name.startswith("datasets--"):
            return above.parent.parent
    return folder


def table_in(path: Path, names: Sequence[str]) -> Path:
    """`path` itself if it is a file, else the first of `names` inside the folder `path`."""
    return path if path.is_file() else find_file(path, names)


def hub_snapshot(hub: str, revision: str | None, files: Sequence[str] | None = None) -> Path:
    """Local folder of a hub dataset repo (for releases that are files, not a table).

    `files` limits the download to those file names (GameQA's test files, not its 3 GB of
    training images).
    """
    from huggingface_hub import snapshot_download

    patterns = list(files) if files is not None else None
    with _offline_is_one_line(hub):
        folder = snapshot_download(
            hub, repo_type="dataset", revision=revision, allow_patterns=patterns
        )
    return Path(folder)


_HUB_PROBE_TIMEOUT_S = 3.0  # a reachable hub answers a TCP connect well within this


@contextlib.contextmanager
def _offline_is_one_line(hub: str) -> Iterator[None]:
    """Turn "no network and not cached" into one `UserError` that says what to do.

    Without this, an unreachable hub costs minutes of retries and ends in a long trace. The hub
    is probed once with a short TCP connect; offline (`HF_HUB_OFFLINE=1`) the cache is used and
    a miss is reported.
    """
    from huggingface_hub import constants

    fix = f"pass a local copy with --data NAME=PATH, or go online once to cache {hub!r}"
    local = Path(hub).exists()  # datasets also loads a folder in hub layout
    if not local and not constants.HF_HUB_OFFLINE and not _hub_reachable(constants.ENDPOINT):
        raise UserError(
            f"the Hugging Face hub ({constants.ENDPOINT}) is unreachable: set HF_HUB_OFFLINE=1 "
            f"to use a cached copy of {hub!r}, or {fix}"
        )
    try:
        yield
    except OSError:
        if not constants.HF_HUB_OFFLINE:
            raise
        raise UserError(
            f"{hub!r} is not in the local Hugging Face cache (HF_HUB_OFFLINE=1): {fix}"
        ) from None


def _hub_reachable(endpoint: str) -> bool:
    url = urllib.parse.urlsplit(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=_HUB_PROBE_TIMEOUT_S).close()
    except OSError:
        return False
    return True


class ZipImages:
    """Images read on demand from a release's zip, so a load never unpacks or reads it whole.

    Rows carry a member name; `read(name)` returns that member's bytes when a sample is built,
    decompressed in bounded chunks up to `max_bytes` (a 4.5 MB zip can hold a 1 GiB member; a
    bigger one is refused, `FileRefused`). A leading "./" is tolerated, and so is a zip that
    nests everything in one top folder ("babyvision_data/images/1.png" for "images/1.png").
    """

    max_bytes: int = MAX_FILE_BYTES

    def __init__(self, path: Path) -> None:
        self.path = path
        self._zip = zipfile.ZipFile(path)
        self._names = set(self._zip.namelist())
        self._tops = sorted({name.split("/", 1)[0] for name in self._names if "/" in name})

    def member(self, name: str) -> str | None:
        """The zip member `name` stands for, or None."""
        name = name.removeprefix("./")
        for candidate in (name, *(f"{top}/{name}" for top in self._tops)):
            if candidate in self._names:
                return candidate
        return None

    def read(self, name: str) -> bytes:
        """The bytes of member `name`; FileRefused when the zip does not hold it, cannot unpack
        it, or it is bigger than `max_bytes` (by its header, or once decompressed that far)."""
        member = self.member(name)
        if member is None:
            raise FileRefused("missing", f"{self.path} holds no image {name!r}")
        info = self._zip.getinfo(member)
        where = f"{self.path}:{member}"
        if info.file_size > self.max_bytes:
            raise FileRefused(
                "too_large", f"{where} unpacks to {info.file_size} bytes, over {self.max_bytes}"
            )
        try:
            with self._zip.open(info) as stream:
                return read_capped(stream, self.max_bytes, where)
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
            raise FileRefused("unreadable", f"{where} cannot be unpacked: {exc}") from None

    def find(self, suffix: str) -> str | None:
        """The first member (in name order) whose name ends with `suffix`."""
        return next((n for n in sorted(self._names) if n.endswith(suffix)), None)


def release_image(name: str, folder: Path, archive: ZipImages | None) -> ImageSource:
    """An image named relative to `folder`: the unpacked file if it exists, else the zip's bytes."""
    path = resolve_relative(name, [folder])
    if path.is_file() or archive is None or archive.member(name) is None:
        return path
    return archive.read(name)
