"""`beacon.files.read_file`: only regular files under the root, never past the cap, never a
hang (a FIFO is refused before it is opened for reading)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from tests.hostile import make_dev_zero, make_fifo

from beacon.files import FileRefused, path_under, read_capped, read_file
from beacon.images import ImageError, load_image


def refusal(path: Path, root: Path | None = None, max_bytes: int = 1 << 20) -> str:
    with pytest.raises(FileRefused) as caught:
        read_file(path, root, max_bytes)
    return caught.value.reason


def test_reads_a_regular_file_under_its_root(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.png").write_bytes(b"x" * 3000)
    os.symlink(tmp_path / "data" / "a.png", tmp_path / "data" / "link.png")  # stays inside
    assert read_file(tmp_path / "data" / "a.png", tmp_path / "data") == b"x" * 3000
    assert read_file(tmp_path / "data" / "link.png", tmp_path / "data") == b"x" * 3000
    assert read_file(tmp_path / "data" / "a.png") == b"x" * 3000  # no root: anywhere


def test_refuses_dot_dot_absolute_paths_and_symlinks_out_of_the_root(tmp_path: Path) -> None:
    root = tmp_path / "dataset"
    root.mkdir()
    (tmp_path / "secret.txt").write_text("key")
    os.symlink(tmp_path / "secret.txt", root / "innocent.png")
    assert refusal(root / ".." / "secret.txt", root) == "outside_root"
    assert refusal(tmp_path / "secret.txt", root) == "outside_root"
    assert refusal(root / "innocent.png", root) == "outside_root"
    os.symlink(tmp_path / "gone.txt", root / "dangling.png")  # pointing out, target missing
    with pytest.raises(FileRefused, match="outside the dataset root"):
        path_under(root / "dangling.png", root)


@pytest.mark.timeout(20)
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = make_fifo(tmp_path / "image.png")
    assert refusal(fifo, tmp_path) == "not_regular_file"
    with pytest.raises(ImageError, match="not a regular file"):
        load_image(fifo)


@pytest.mark.timeout(20)
def test_dev_zero_is_refused_not_read(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="not a regular file"):
        load_image(Path("/dev/zero"))
    assert refusal(Path("/dev/zero")) == "not_regular_file"
    assert refusal(make_dev_zero(tmp_path / "zero.png"), tmp_path) == "not_regular_file"


def test_size_cap_by_size_and_by_bytes_read(tmp_path: Path) -> None:
    (tmp_path / "big.png").write_bytes(b"x" * 5000)
    assert refusal(tmp_path / "big.png", tmp_path, max_bytes=4999) == "too_large"
    assert len(read_file(tmp_path / "big.png", tmp_path, max_bytes=5000)) == 5000
    grown = io.BytesIO(b"y" * (3 << 20))  # a stream longer than it said: stops at the cap
    with pytest.raises(FileRefused, match="more than 1048576 bytes"):
        read_capped(grown, 1 << 20, "member")
    assert grown.tell() <= (1 << 20) + 1


def test_missing_and_folder(tmp_path: Path) -> None:
    assert refusal(tmp_path / "nope.png", tmp_path) == "missing"
    assert refusal(tmp_path, tmp_path) == "not_regular_file"
