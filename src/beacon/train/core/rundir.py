"""A run folder's identity: its resolved `config.yaml`, written once and checked on resume."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import yaml
from pydantic import BaseModel

from beacon.config import drop_keys, flatten, identity, identity_diff, to_yaml
from beacon.errors import UserError
from beacon.train.core.config import OPERATIONAL_KEYS

CONFIG_FILE = "config.yaml"


class RunFolderError(UserError, ValueError):
    """The run folder cannot be used with this config (exists, or was made with another one)."""


def check_run_dir(
    run_dir: Path, config: BaseModel, resume: bool, operational: Collection[str] = OPERATIONAL_KEYS
) -> None:
    """Raise unless `config` may run in `run_dir` (every process checks; none writes).

    Without `resume`, a folder that already has a config is refused (its checkpoints would be
    mixed with the new run's). With `resume`, every differing key other than the `operational`
    ones (default: `config.OPERATIONAL_KEYS`) is named in the error.
    """
    path = run_dir / CONFIG_FILE
    if path.exists():
        if not resume:
            raise RunFolderError(
                f"{run_dir} already holds a run; pass --resume to continue it, or set "
                "train.output_dir to a new folder"
            )
        saved = yaml.safe_load(path.read_text()) or {}
        differing = identity_diff(
            drop_keys(flatten(saved), operational), identity(config, operational)
        )
        if differing:
            raise RunFolderError(
                f"{run_dir} was made with a different config; differing keys: "
                f"{'; '.join(differing)}. Resume with the original settings, or set "
                "train.output_dir to a new folder"
            )


def write_config(run_dir: Path, config: BaseModel) -> None:
    """Write the resolved config to `run_dir/config.yaml` (main process)."""
    path = run_dir / CONFIG_FILE
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(to_yaml(config))
    tmp.replace(path)
