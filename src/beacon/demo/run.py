"""`run_demo`: check the demo folder, run the stages, write the report."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from beacon.demo.config import OPERATIONAL_KEYS, DemoConfig, cold_start_identity
from beacon.errors import UserError
from beacon.runfolder import check_run_folder

CONFIG_FILE = "demo.yaml"


def run_demo(cfg: DemoConfig, log: Callable[[str], None]) -> Path:
    """Every stage (resuming finished work), then `report.md`; returns the report's path."""
    from beacon.demo.report import write_report
    from beacon.demo.schedule import run_stages

    cfg = _prepare(cfg)
    run_stages(cfg, log)
    log("writing the report")
    return write_report(cfg)


def export_cold_start(cfg: DemoConfig, folder: Path, log: Callable[[str], None]) -> Path:
    """Run (or resume) the cold-start stages of `cfg` and copy the SFT checkpoint's model files
    into `folder` with the settings they were made with (`COLD_START_RECORD`): what
    `cold_start: shipped` starts from when `folder` is the package's assets."""
    from beacon.demo.schedule import run_stages
    from beacon.demo.stages import COLD_START_RECORD, DemoStages

    if cfg.cold_start != "train":
        raise UserError("--export-cold-start trains the cold start: leave cold_start=train")
    cfg = _prepare(cfg)
    stages = DemoStages(cfg)
    run_stages(cfg, log, stages.cold_start_stages())
    source = stages.sft_model()
    folder.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        if path.is_file() and path.name not in ("COMPLETE", "train_state.json"):
            shutil.copy2(path, folder / path.name)
    record = {"settings": cold_start_identity(cfg), "made_by": "beacon demo --export-cold-start"}
    (folder / COLD_START_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    log(f"cold start exported to {folder}")
    return folder


def _prepare(cfg: DemoConfig) -> DemoConfig:
    """`cfg` with an absolute `out` (so `runs/demo` and `./runs/demo` are one folder to the
    stages' runs, whose identities hold model paths under it), the folder checked, torch's
    threads set."""
    import torch

    from beacon.demo.schedule import quiet_libraries

    cfg = cfg.model_copy(update={"out": str(Path(cfg.out).resolve())})
    check_run_folder(
        Path(cfg.out), cfg, OPERATIONAL_KEYS, folder_setting="--out", config_file=CONFIG_FILE
    )
    quiet_libraries()
    torch.set_num_threads(cfg.threads)
    return cfg
