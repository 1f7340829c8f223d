"""A run folder's identity: the one check every command that writes a run folder makes (eval,
the trainers, the demo) before it adds results to it; and the one reader of the two files every
run folder may hold, its config (`read_run_config`) and its summary (`read_summary`).

A run's identity is its whole resolved config minus a named list of operational keys
(`beacon.config.identity`). The folder records its config in a YAML file that names its model on
the first line and its identity hash on the second (`beacon.config.config_class_for` reads the
first). A later command into the same folder may change operational keys only; any other
difference is refused with `RunFolderMismatch`, which names every differing key and the setting
that picks another folder, because resuming would mix results made under two configs. A setting
added to Beacon after the folder was written counts as unchanged while it has its default (the
folder's run computed what the default computes), so an upgrade does not orphan run folders.

The names of the files every kind of run folder shares are written here once (`CONFIG_FILE`,
`SUMMARY_FILE`, a trainer's logs), with the questions asked of a folder by those names: does it
hold a run to resume (`has_run`), what did its finished run sum up (`read_summary`, written by
`write_summary`).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from beacon.config import (
    drop_keys,
    field_default,
    flatten,
    identity,
    identity_diff,
    identity_hash,
    to_yaml,
)
from beacon.errors import UserError
from beacon.jsonl import write_atomic

CONFIG_FILE = "config.yaml"
"""The resolved config of the run in a folder (headed by its model and identity hash)."""
SUMMARY_FILE = "summary.json"
"""What a finished run or stage sums up (an eval run's scores, a data stage's counts), written
last and atomically: its presence means the run in that folder finished."""
METRICS_FILE = "metrics.jsonl"
"""A trainer's per-step metrics, one JSON line per logged step."""
REVUE_LOG = "revue.jsonl"
"""An OPD run's per-group ReVuE record (critic verdicts, token weights), read by `beacon revue`."""
CRITIC_LOG = "critic.jsonl"
"""An OPD run's critic exchanges, read by `beacon revue`."""


def has_run(folder: Path) -> bool:
    """Whether `folder` already holds a run (its config is recorded): a trainer resumes it."""
    return (folder / CONFIG_FILE).exists()


def write_summary(folder: Path, summary: dict[str, Any]) -> None:
    """Write `folder`'s summary atomically (a kill leaves the old one or none: never half of
    one, which `read_summary` would take for a finished run); no NaN (not JSON)."""
    write_atomic(folder / SUMMARY_FILE, json.dumps(summary, indent=2, allow_nan=False) + "\n")


class RunFolderMismatch(UserError, ValueError):
    """The folder holds a run this config may not continue: made with other settings, unreadable,
    or (without resume) there at all."""


def check_run_folder(
    folder: Path,
    config: BaseModel,
    operational: Collection[str],
    *,
    folder_setting: str,
    resume: bool = True,
    write: bool = True,
    config_file: str = CONFIG_FILE,
) -> str:
    """Raise `RunFolderMismatch` unless `config` may run in `folder`; then (with `write`) record
    it there. Returns the run's identity hash.

    `folder_setting` is what the user sets to pick another folder (``--out``,
    ``train.output_dir``); the errors name it as the fix. Without `resume` a folder that already
    holds a config is refused outright (a trainer's checkpoints would mix with the new run's). A
    trainer checks in every process with ``write=False`` and records the config from its main
    process (`write_run_config`) once all have checked, so no process sees another's write.
    """
    path = folder / config_file
    now = identity(config, operational)
    if path.exists():
        if not resume:
            raise RunFolderMismatch(
                f"{folder} already holds a run; pass --resume to continue it, or use a new "
                f"{folder_setting}"
            )
        before = _stored_identity(path, operational, folder_setting)
        added = {
            key
            for key, value in now.items()
            if key not in before and field_default(type(config), key) == value
        }
        changed = identity_diff(before, {k: v for k, v in now.items() if k not in added})
        if changed:
            raise RunFolderMismatch(
                f"{folder} holds a run made with other settings ({'; '.join(changed)}); "
                f"resuming would mix them. Rerun with those settings, or use a new {folder_setting}"
            )
    if write:
        write_run_config(folder, config, operational, config_file)
    return identity_hash(now)


def write_run_config(
    folder: Path,
    config: BaseModel,
    operational: Collection[str],
    config_file: str = CONFIG_FILE,
) -> None:
    """Write the resolved config to `folder/config_file` atomically, headed by its model's name
    (so `load_config(config_class_for(path), path)` rebuilds it) and its identity hash."""
    cls = type(config)
    header = (
        f"# config: {cls.__module__}:{cls.__qualname__}\n"
        f"# run identity: sha256:{identity_hash(identity(config, operational))}\n"
    )
    write_atomic(folder / config_file, header + to_yaml(config))


def _stored_identity(
    path: Path, operational: Collection[str], folder_setting: str
) -> dict[str, Any]:
    try:
        stored = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise RunFolderMismatch(
            f"{path} cannot be read ({' '.join(str(exc).split())}); is this a beacon run "
            f"folder? Use a new {folder_setting}"
        ) from None
    if not isinstance(stored, dict):
        raise RunFolderMismatch(f"{path} is not a beacon run config; use a new {folder_setting}")
    return drop_keys(flatten(stored), operational)


def read_run_config(folder: Path, config_file: str = CONFIG_FILE) -> dict[str, Any]:
    """The config `folder` records, as plain data; {} when it holds none (or not a mapping).

    Reports read it for labels and settings without validating it against a config class: a
    folder written by an older Beacon still gets a report.
    """
    path = folder / config_file
    loaded = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
    return loaded if isinstance(loaded, dict) else {}


def read_summary(folder: Path) -> dict[str, Any]:
    """`folder/summary.json`; {} while the run has not finished (no summary yet).

    A summary is written whole (`write_atomic`), so one that does not parse was damaged after
    the run: that is an error naming the file, never a silent gap in a report.
    """
    path = folder / SUMMARY_FILE
    if not path.is_file():
        return {}
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        loaded = None
    if not isinstance(loaded, dict):
        raise UserError(
            f"{path} is not a JSON object; the run writes it whole, so it was changed afterwards. "
            "Delete it and rerun the command that made the folder to write it again"
        )
    return loaded
