"""A benchmark row is data someone else wrote: the files it names are read only under the dataset
root, only when they are regular files, never past the size cap, and a row that breaks a rule is
skipped and counted by reason, never a crash or a hang. Plus two layouts users download
(BabyVision's `--local-dir` copy, GameQA options written as text)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import zipfile
from pathlib import Path

import pytest
from tests.hostile import make_fifo

from beacon.benchmarks import get_benchmark
from beacon.benchmarks.tables import ZipImages

from .local_copies import (
    DATA,
    build_babyvision,
    build_gameqa,
    build_visulogic,
    build_vstar,
    png,
)

SECRET = {"target_object": ["private key"], "bbox": [[1, 2, 3, 4]], "token": "hunter2"}


def vstar_at(folder: Path) -> Path:
    folder.mkdir()
    return build_vstar(folder)


def vstar_rows(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "test_questions.jsonl").read_text().splitlines()]


def write_vstar_rows(root: Path, rows: list[dict]) -> None:
    (root / "test_questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def outside_files(tmp_path: Path) -> Path:
    """A folder beside the dataset holding an image and the JSON a V* row would read with it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jpg").write_bytes(b"not yours")
    (outside / "secret.json").write_text(json.dumps(SECRET))
    return outside


def test_vstar_row_cannot_climb_out_of_the_root(tmp_path: Path, caplog) -> None:
    root = vstar_at(tmp_path / "vstar")
    outside_files(tmp_path)
    rows = vstar_rows(root)
    rows[0]["image"] = "../outside/secret.jpg"
    write_vstar_rows(root, rows)
    bench = get_benchmark("vstar")
    with caplog.at_level(logging.WARNING):
        samples = list(bench.load(path=root))
    assert [s.id for s in samples] == ["1", "2"]
    assert all("hunter2" not in json.dumps(s.metadata) for s in samples)
    assert bench.skipped == {"outside_root": 1}
    assert "vstar: skipped 1 rows (1 outside_root)" in caplog.text


def test_vstar_symlinks_out_of_the_root_are_refused(tmp_path: Path) -> None:
    root = vstar_at(tmp_path / "vstar")
    outside = outside_files(tmp_path)
    for suffix in (".jpg", ".json"):
        link = root / "direct_attributes" / f"sa_1{suffix}"
        link.unlink()
        os.symlink(outside / f"secret{suffix}", link)
    bench = get_benchmark("vstar")
    assert [s.id for s in bench.load(path=root)] == ["1", "2"]
    assert bench.skipped == {"outside_root": 1}


@pytest.mark.timeout(30)
def test_vstar_fifo_image_is_skipped_not_kept_for_the_episode_to_hang_on(tmp_path: Path) -> None:
    root = vstar_at(tmp_path / "vstar")
    (root / "relative_position" / "sa_3.jpg").unlink()
    make_fifo(root / "relative_position" / "sa_3.jpg")
    bench = get_benchmark("vstar")
    assert [s.id for s in bench.load(path=root)] == ["0", "1"]
    assert bench.skipped == {"not_regular_file": 1}


def test_vstar_hub_snapshot_links_into_blobs_are_inside(tmp_path: Path) -> None:
    """A hub snapshot's files are symlinks into the repo's `blobs/`: that is still the dataset."""
    built = vstar_at(tmp_path / "built")
    repo = tmp_path / "hub" / "datasets--craigwu--vstar_bench"
    snapshot = repo / "snapshots" / "d9ae62c903da0c98336e85c5ee89cd863b04b4da"
    for n, file in enumerate(sorted(p for p in built.rglob("*") if p.is_file())):
        blob = repo / "blobs" / f"blob{n}"
        blob.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(file, blob)
        link = snapshot / file.relative_to(built)
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, link.parent), link)
    bench = get_benchmark("vstar")
    samples = list(bench.load(path=snapshot))
    assert len(samples) == 3 and not bench.skipped
    assert samples[0].metadata["annotation"]["target_object"] == ["glove"]


def test_an_absolute_image_path_in_a_row_is_refused(tmp_path: Path) -> None:
    data = json.loads((DATA / "mathvista" / "testmini.json").read_text())
    data["1"]["image"] = "/etc/hostname"
    data["2"]["image"] = "images/../../../etc/hostname"
    (tmp_path / "testmini.json").write_text(json.dumps(data))
    bench = get_benchmark("mathvista")
    samples = list(bench.load(path=tmp_path))
    assert len(samples) == len(data) - 2 and {"1", "2"}.isdisjoint(s.id for s in samples)
    assert bench.skipped == {"outside_root": 2}


def test_a_zip_member_over_the_cap_is_refused_before_it_is_unpacked(
    tmp_path: Path, monkeypatch
) -> None:
    root = build_visulogic(tmp_path)
    with zipfile.ZipFile(root / "images.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("images/00000.png", png())
        archive.writestr("images/00001.png", b"\0" * (4 << 20))  # a 4 KB member of 4 MiB
    monkeypatch.setattr(ZipImages, "max_bytes", 1 << 20)
    bench = get_benchmark("visulogic")
    assert [s.id for s in bench.load(path=root)] == ["00000"]
    assert bench.skipped == {"too_large": 1}


def test_a_zip_member_that_lies_about_its_size_is_read_in_bounded_chunks(tmp_path: Path) -> None:
    """The header says 1000 bytes, the data inflates to 8 MiB: reading stops at what the header
    promised (zipfile truncates there), the CRC then fails, and the row is skipped."""
    root = build_gameqa(tmp_path)
    member = "images/zuma_00002.png"
    rebuilt = tmp_path / "rebuilt.zip"
    with (
        zipfile.ZipFile(root / "games_images_test.zip") as old,
        zipfile.ZipFile(rebuilt, "w", zipfile.ZIP_DEFLATED) as new,
    ):
        for name in old.namelist():
            new.writestr(name, b"\0" * (8 << 20) if name == member else old.read(name))
    data = bytearray(rebuilt.read_bytes())
    entry = data.index(b"PK\x01\x02")  # central directory entries; find the member's
    while data[entry + 46 : entry + 46 + len(member)] != member.encode():
        entry = data.index(b"PK\x01\x02", entry + 4)
    data[entry + 24 : entry + 28] = struct.pack("<I", 1000)  # central directory: file size
    (root / "games_images_test.zip").write_bytes(bytes(data))
    bench = get_benchmark("gameqa")
    samples = list(bench.load(path=root))
    assert len(samples) == 5 and "zuma" not in " ".join(s.id for s in samples)
    assert bench.skipped == {"unreadable": 1}


def test_babyvision_reads_a_huggingface_cli_local_dir_copy(tmp_path: Path) -> None:
    """`huggingface-cli download UnipatAI/BabyVision --repo-type dataset --local-dir X`: the
    parquet under X/data/, a README and the download cache beside it."""
    copy = tmp_path / "BabyVision"
    build_babyvision(copy)
    (copy / "README.md").write_text("---\nlicense: mit\n---\n# BabyVision\n")
    (copy / ".gitattributes").write_text("*.parquet filter=lfs diff=lfs merge=lfs -text\n")
    (copy / ".cache" / "huggingface").mkdir(parents=True)
    samples = {s.id: s for s in get_benchmark("babyvision").load(path=copy)}
    assert list(samples) == ["101", "445", "638", "212", "330"]
    assert samples["101"].answer == "B" and isinstance(samples["101"].images[0], bytes)


def test_gameqa_options_written_as_text(tmp_path: Path) -> None:
    """`options` as the text of a list (str(list), or JSON) reads as the list: an answer given as
    the option's text names its letter; text that opens a list but does not parse skips the row."""
    root = build_gameqa(tmp_path)
    rows = json.loads((root / "games_data_test.json").read_text())
    zuma, lifegame = rows[2], rows[1]
    zuma["options"] = str(zuma["options"])  # "['red', 'yellow', 'blue', 'green']"
    lifegame["options"] = '["A: 6", "B: 2", "C: 0", "D: 8"'  # cut short
    (root / "games_data_test.json").write_text(json.dumps(rows))
    bench = get_benchmark("gameqa")
    samples = {s.id: s for s in bench.load(path=root)}
    sample = samples["zuma-00002"]
    assert sample.options == {"A": "red", "B": "yellow", "C": "blue", "D": "green"}
    assert sample.answer == "B"
    assert bench.score("<answer>yellow</answer>", sample).correct
    assert not bench.score("<answer>blue</answer>", sample).correct
    assert "lifegame-00004" not in samples and bench.skipped == {"bad_options": 1}
