"""SFT configs: every shipped one validates; typos and bad values are named; resume identity."""

from __future__ import annotations

from pathlib import Path

import pytest

from beacon import configs
from beacon.config import ConfigError, load_config
from beacon.runfolder import RunFolderMismatch, check_run_folder, write_run_config
from beacon.train.core.config import OPERATIONAL_KEYS
from beacon.train.sft import SFTConfig

SHIPPED = [  # SFT configs; GRPO configs are checked in test_grpo.py
    p
    for p in sorted((configs.root() / "train").glob("*.yaml"))
    if ":SFTConfig" in p.read_text().splitlines()[0]
]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_train_configs_validate(path: Path) -> None:
    assert isinstance(load_config(SFTConfig, path), SFTConfig)


def test_overrides_and_all_problems_at_once(tmp_path: Path) -> None:
    path = SHIPPED[0]
    cfg = load_config(SFTConfig, path, ["train.lr=2e-5", "model.lora={r: 4}"])
    assert cfg.train.lr == 2e-5 and cfg.model.lora.r == 4
    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, path, ["train.lrr=1", "train.max_steps=many"])
    text = str(err.value)
    assert "2 problems" in text and "train.lrr" in text and "train.max_steps" in text
    assert "did you mean train.lr?" in text


def test_warmup_must_fit_the_run() -> None:
    with pytest.raises(ConfigError, match="warmup_steps"):
        load_config(SFTConfig, SHIPPED[0], ["train.warmup_steps=5000"])


def check(run_dir: Path, cfg: SFTConfig, resume: bool) -> None:
    """The check every trainer process makes before the main one writes config.yaml."""
    check_run_folder(
        run_dir,
        cfg,
        OPERATIONAL_KEYS,
        folder_setting="train.output_dir",
        resume=resume,
        write=False,
    )


def test_resume_refuses_another_config_and_names_the_keys(tmp_path: Path) -> None:
    cfg = load_config(SFTConfig, SHIPPED[0], [f"train.output_dir={tmp_path}"])
    check(tmp_path, cfg, resume=False)
    write_run_config(tmp_path, cfg, OPERATIONAL_KEYS)
    with pytest.raises(RunFolderMismatch, match="--resume"):
        check(tmp_path, cfg, resume=False)
    check(tmp_path, cfg, resume=True)
    # an operational key may change on resume
    check(
        tmp_path,
        cfg.model_copy(update={"train": cfg.train.model_copy(update={"keep_last": 5})}),
        True,
    )
    other = load_config(
        SFTConfig,
        SHIPPED[0],
        [f"train.output_dir={tmp_path}", "train.lr=0.5", "data.max_length=64"],
    )
    with pytest.raises(RunFolderMismatch, match=r"data\.max_length: .*; train\.lr: "):
        check(tmp_path, other, resume=True)
