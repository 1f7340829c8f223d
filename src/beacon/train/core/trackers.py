"""Experiment trackers (`train.report_to`: TensorBoard, Weights & Biases, MLflow) through
accelerate's own trackers: `Accelerator(log_with=...)`, `init_trackers`, `accelerator.log`,
`end_training`.

`metrics.jsonl` stays the record (the health replay, `beacon report` and a resume read it); a
tracker gets a copy of each of its lines, the same keys, numbers only. accelerate skips a
tracker whose package is missing with a debug message; `check_trackers` makes that an error
that names the package, raised by `setup.make_accelerator` before any model is loaded.

Where each tracker writes: TensorBoard to `<output_dir>/tensorboard/beacon/`; W&B to project
`beacon`, run name the run folder's name, local files under `<output_dir>/wandb/`
(`WANDB_MODE=offline` keeps them there); MLflow to experiment `beacon` at its tracking URI
(`MLFLOW_TRACKING_URI`). The run's resolved config goes to each as hyperparameters.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from beacon.config import flatten, to_dict
from beacon.errors import UserError

PROJECT = "beacon"
"""The trackers' project (W&B project, MLflow experiment, TensorBoard sub-folder)."""
TENSORBOARD_DIR = "tensorboard"
"""The run folder's sub-folder for TensorBoard event files (accelerate's `logging_dir`)."""


class MissingTracker(UserError, ImportError):
    """`train.report_to` names a tracker whose package is not installed."""


def check_trackers(report_to: Iterable[str]) -> None:
    """Raise `MissingTracker` for the first tracker in `report_to` that cannot start here
    (accelerate's own availability checks, so this agrees with what it would skip)."""
    from accelerate.utils import is_mlflow_available, is_tensorboard_available, is_wandb_available

    available = {
        "tensorboard": is_tensorboard_available,
        "wandb": is_wandb_available,
        "mlflow": is_mlflow_available,
    }
    for name in report_to:
        if not available[name]():
            raise MissingTracker(
                f"train.report_to names {name!r} but the {name} package is not installed; "
                f"run `pip install {name}` or remove {name!r} from train.report_to"
            )


def tracker_dir(output_dir: str | Path) -> Path:
    """accelerate's `logging_dir` for a run folder (TensorBoard writes under it)."""
    return Path(output_dir) / TENSORBOARD_DIR


def start_trackers(accelerator: Any, config: Any, run_dir: Path) -> None:
    """`init_trackers` for the trackers the accelerator was made with, with the resolved config
    as hyperparameters; nothing when there are none."""
    if not accelerator.log_with:
        return
    accelerator.init_trackers(
        PROJECT,
        config=hyperparameters(to_dict(config)),
        init_kwargs={
            "wandb": {"name": run_dir.name, "dir": str(run_dir)},
            "mlflow": {"run_name": run_dir.name},
        },
    )


def hyperparameters(config: Mapping[str, Any]) -> dict[str, bool | int | float | str]:
    """The config as flat ``{"train.lr": 1e-05}``; a value TensorBoard's hparams cannot hold
    (a list, None) as its JSON text."""
    return {
        key: value if isinstance(value, bool | int | float | str) else json.dumps(value)
        for key, value in flatten(config).items()
    }


def scalars(metrics: Mapping[str, Any]) -> dict[str, float | int]:
    """The numbers of a metrics line for the trackers (`step` is their x axis, not a value;
    a metric that is None this step is left out)."""
    return {
        key: value
        for key, value in metrics.items()
        if key != "step" and isinstance(value, int | float)
    }
