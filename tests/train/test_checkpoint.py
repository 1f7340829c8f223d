"""Checkpoint folders: a torn one is never loaded; the newest N complete ones are kept."""

from __future__ import annotations

from pathlib import Path

from beacon.train.core import checkpoint as ckpt
from beacon.train.core.train_loop import step_indices


def _complete(run: Path, step: int) -> Path:
    staging = ckpt.staging_dir(run, step)
    staging.mkdir(parents=True)
    ckpt.TrainState(step=step, samples_seen=4 * step).write(staging)
    return ckpt.commit(run, step)


def test_torn_checkpoints_are_never_loaded_and_are_removed(tmp_path: Path) -> None:
    _complete(tmp_path, 2)
    (tmp_path / "checkpoint-6").mkdir()  # no COMPLETE marker: torn
    ckpt.staging_dir(tmp_path, 4).mkdir()  # killed while staging
    latest = ckpt.latest_checkpoint(tmp_path)
    assert latest == tmp_path / "checkpoint-2"
    assert ckpt.TrainState.read(latest) == ckpt.TrainState(step=2, samples_seen=8)
    ckpt.remove_stale(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-2"]


def test_prune_keeps_the_newest(tmp_path: Path) -> None:
    for step in (2, 4, 6, 8):
        _complete(tmp_path, step)
    ckpt.prune(tmp_path, keep_last=2)
    assert [s for s, _ in ckpt.complete_checkpoints(tmp_path)] == [6, 8]


def test_commit_replaces_a_checkpoint_of_the_same_step(tmp_path: Path) -> None:
    _complete(tmp_path, 2)
    _complete(tmp_path, 2)
    assert [s for s, _ in ckpt.complete_checkpoints(tmp_path)] == [2]


def test_data_stream_is_a_seeded_permutation_per_epoch() -> None:
    first = step_indices(0, 5, 5, seed=3)
    assert sorted(first) == list(range(5))
    assert step_indices(0, 5, 5, seed=3) == first
    two_epochs = step_indices(0, 10, 5, seed=3)
    assert two_epochs[:5] == first and sorted(two_epochs[5:]) == list(range(5))
    assert step_indices(3, 4, 5, seed=3) == two_epochs[3:7]
