"""`run_demo`: check the demo folder, run the stages, write the report."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml

from beacon.config import drop_keys, flatten, identity, identity_diff, to_yaml
from beacon.demo.config import OPERATIONAL_KEYS, DemoConfig
from beacon.errors import UserError

CONFIG_FILE = "demo.yaml"


class DemoFolderMismatch(UserError, ValueError):
    """The demo folder was made with other settings."""


def check_folder(cfg: DemoConfig) -> None:
    """Refuse a folder made with other result-changing settings, naming the differing keys."""
    root = Path(cfg.out)
    path = root / CONFIG_FILE
    if path.exists():
        saved = drop_keys(flatten(yaml.safe_load(path.read_text()) or {}), OPERATIONAL_KEYS)
        differing = identity_diff(saved, identity(cfg, OPERATIONAL_KEYS))
        if differing:
            raise DemoFolderMismatch(
                f"{root} holds a demo made with other settings ({'; '.join(differing)}); "
                "rerun with those settings to resume, or pick a new --out"
            )
    root.mkdir(parents=True, exist_ok=True)
    path.write_text(to_yaml(cfg))


def run_demo(cfg: DemoConfig, log: Callable[[str], None]) -> Path:
    """Every stage (resuming finished work), then `report.md`; returns the report's path."""
    import torch

    from beacon.demo.report import write_report
    from beacon.demo.schedule import quiet_libraries, run_stages

    # Absolute, so `--out runs/demo` and `--out ./runs/demo` are one folder to the stages' runs
    # (their identities hold model paths under it).
    cfg = cfg.model_copy(update={"out": str(Path(cfg.out).resolve())})
    check_folder(cfg)
    quiet_libraries()
    torch.set_num_threads(cfg.threads)
    run_stages(cfg, log)
    log("writing the report")
    return write_report(cfg)
