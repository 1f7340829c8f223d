"""`train.report_to`: a short SFT run writes TensorBoard event files that TensorBoard reads back
with the same numbers as metrics.jsonl; a tracker whose package is missing is one error line,
before any model loads; the trackers may change between a run and its resume."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from beacon.cli import main
from beacon.runfolder import check_run_folder, write_run_config
from beacon.train.core.config import OPERATIONAL_KEYS
from beacon.train.core.metrics import hyperparameters, read_metrics, scalars
from beacon.train.sft import SFTConfig, run_sft

from .helpers import sft_settings


@pytest.mark.slow
def test_tensorboard_reads_back_the_logged_loss(
    tiny_model_path: Path, train_data: Path, tmp_path: Path
) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    settings = sft_settings(
        tiny_model_path, train_data, run, max_steps=2, save_every=2, report_to=["tensorboard"]
    )
    run_sft(SFTConfig.model_validate(settings))

    logged = read_metrics(run / "metrics.jsonl")
    events = EventAccumulator(str(run / "tensorboard" / "beacon"))
    events.Reload()
    # the same keys as metrics.jsonl, every number of it
    assert set(events.Tags()["scalars"]) == {key for m in logged for key in scalars(m)}
    loss = [(e.step, e.value) for e in events.Scalars("loss")]
    # TensorBoard stores float32: equal to the JSON float to float32 precision
    assert [step for step, _ in loss] == [m["step"] for m in logged] == [1, 2]
    assert [value for _, value in loss] == pytest.approx([m["loss"] for m in logged], rel=1e-6)


@pytest.mark.slow
def test_wandb_offline_run_holds_the_logged_loss(
    tiny_model_path: Path, train_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """W&B in offline mode (nothing is sent anywhere): the run folder holds one offline W&B run
    whose record file carries every step's loss as metrics.jsonl has it, and the resolved config.
    The record file is read as bytes (its values are JSON text inside protobuf records), so the
    test uses no W&B internals."""
    pytest.importorskip("wandb")
    import json

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = tmp_path / "run"
    settings = sft_settings(
        tiny_model_path, train_data, run, max_steps=2, save_every=2, report_to=["wandb"]
    )
    run_sft(SFTConfig.model_validate(settings))

    logged = read_metrics(run / "metrics.jsonl")
    [record] = list((run / "wandb").glob("offline-run-*/run-*.wandb"))
    data = record.read_bytes()
    assert [m["step"] for m in logged] == [1, 2]
    assert all(json.dumps(m["loss"]).encode() in data for m in logged)
    assert b"train.max_steps" in data


@pytest.mark.parametrize(
    ("tracker", "check"),
    [
        ("tensorboard", "is_tensorboard_available"),
        ("wandb", "is_wandb_available"),
        ("mlflow", "is_mlflow_available"),
    ],
)
def test_a_missing_tracker_is_one_line_before_any_model_loads(
    tracker: str,
    check: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    import accelerate.utils

    monkeypatch.setattr(accelerate.utils, check, lambda: False)
    run = tmp_path / "run"
    settings = sft_settings(tmp_path / "no-such-model", tmp_path, run, report_to=[tracker])
    config = tmp_path / "sft.yaml"
    config.write_text(yaml.safe_dump(settings))
    with pytest.raises(SystemExit) as exited:
        main(["train", "sft", "--config", str(config)])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: train.report_to names {tracker!r} but the {tracker} package is not "
        f"installed; run `pip install {tracker}` or remove {tracker!r} from train.report_to"
    ]
    assert not (run / "config.yaml").exists()


def test_trackers_may_change_on_resume(tmp_path: Path) -> None:
    """`train.report_to` is operational, and a run folder that still records the older
    `train.tensorboard` switch resumes."""
    settings = sft_settings(tmp_path / "model", tmp_path, tmp_path / "run")
    before = SFTConfig.model_validate(settings)
    write_run_config(tmp_path, before, OPERATIONAL_KEYS)
    stored = yaml.safe_load((tmp_path / "config.yaml").read_text())
    stored["train"]["tensorboard"] = True
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(stored))
    settings["train"]["report_to"] = ["tensorboard", "wandb"]
    after = SFTConfig.model_validate(settings)
    check_run_folder(
        tmp_path, after, OPERATIONAL_KEYS, folder_setting="train.output_dir", write=False
    )


def test_trackers_get_the_numbers_and_flat_hyperparameters() -> None:
    line = {"step": 3, "loss": 0.5, "grad_norm": None, "tokens": 12, "note": "x"}
    assert scalars(line) == {"loss": 0.5, "tokens": 12}
    flat = hyperparameters({"train": {"lr": 1e-5, "betas": [0.9, 0.99], "lora": None}})
    assert flat == {"train.lr": 1e-5, "train.betas": "[0.9, 0.99]", "train.lora": "null"}
