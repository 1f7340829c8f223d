"""The one place a step's metrics dict is built, and where it is written.

`step_metrics` builds the dict every recipe logs; recipes add their own keys through `extra`
(GRPO rewards, ReVuE weights) so no key is assembled anywhere else. `MetricsLogger` writes it
to `metrics.jsonl` always and to the trackers of `train.report_to` (below), and drives the
progress display (loss, tokens/s, ETA; `beacon.progress`), on the main process only.

Trackers: experiment trackers (`train.report_to`: TensorBoard, Weights & Biases, MLflow)
through accelerate's own trackers: `Accelerator(log_with=...)`, `init_trackers`, `accelerator.log`,
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
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from beacon.config import flatten, to_dict
from beacon.errors import UserError
from beacon.jsonl import JsonlWriter, read_jsonl, repair_jsonl, write_jsonl_atomic
from beacon.progress import Progress
from beacon.rollout import CHECK_REASONS
from beacon.runfolder import METRICS_FILE


@dataclass
class StepOutput:
    """What a trainer's step did, summed over processes: its loss and token counts, how far it
    moved the data stream (`samples`), its own metrics (`extra`), and whether it carries a
    learning signal (`update`)."""

    loss: float
    tokens: int  # non-padding tokens the step's forward passes computed
    padded_tokens: int  # tokens computed, padding included
    loss_tokens: int
    sequences: int
    microbatches: int
    samples: int
    extra: dict[str, Any] = field(default_factory=dict)
    update: bool = True


def step_metrics(
    step: int, out: StepOutput, lr: float, grad_norm: float | None, seconds: float
) -> dict[str, Any]:
    """The metrics dict of one step: the loop's keys, then the trainer's `extra`."""
    return {
        "step": step,
        "loss": out.loss,
        "lr": lr,
        "grad_norm": grad_norm,
        "tokens": out.tokens,
        "loss_tokens": out.loss_tokens,
        "sequences": out.sequences,
        "microbatches": out.microbatches,
        "padding_ratio": 1.0 - out.tokens / max(out.padded_tokens, 1),
        "tokens_per_s": out.tokens / max(seconds, 1e-9),
        "step_s": seconds,
        "update_skipped": int(not out.update),
        **out.extra,
    }


def dropped_metrics(inconsistent: Mapping[str, int], episodes: int) -> dict[str, float]:
    """`health/dropped/<reason>` for every rollout check (`CHECK_REASONS`, zeros included),
    their total `health/dropped` and `health/dropped_share` of the step's `episodes`."""
    counts = {f"health/dropped/{r}": int(inconsistent.get(r, 0)) for r in CHECK_REASONS}
    total = sum(counts.values())
    return {**counts, "health/dropped": total, "health/dropped_share": total / max(episodes, 1)}


class MetricsLogger:
    """JSONL (always), the accelerator's trackers, the progress display; main process only.

    The trackers are `accelerator.trackers`, started by `setup.open_run` and finished by the
    recipe's `accelerator.end_training()`.
    """

    def __init__(
        self,
        run_dir: Path,
        accelerator: Any,
        total_steps: int,
        start_step: int,
        progress_bar: bool = True,
    ) -> None:
        self.accelerator = accelerator
        self.enabled = accelerator.is_main_process
        self.path = run_dir / METRICS_FILE
        if not self.enabled:
            return
        truncate_after(self.path, start_step)
        self._lines = JsonlWriter(self.path)
        self._progress = Progress(
            "train", total=total_steps, unit="step", initial=start_step, enabled=progress_bar
        )

    def log(self, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self._lines.write(metrics)
        if self.accelerator.trackers:
            self.accelerator.log(scalars(metrics), step=metrics["step"])

    def advance(self, metrics: dict[str, Any]) -> None:
        """Count one step, showing loss and throughput."""
        if not self.enabled:
            return
        self._progress.set_postfix(
            {"loss": f"{metrics['loss']:.4f}", "tok_s": f"{metrics['tokens_per_s']:.0f}"}
        )
        self._progress.update()

    def close(self) -> None:
        if not self.enabled:
            return
        self._lines.close()
        self._progress.close()


def truncate_after(path: Path, step: int) -> None:
    """Drop lines of steps after `step` (and a torn last line): a resumed run rewrites them.

    In a step-ordered log those lines are its tail, cut off in place (one `truncate`, then
    fsync), so a writer that opened the file before (the OPD critic's exchange log) keeps
    appending to it; a log whose later lines go back to earlier steps is rewritten through a
    temporary file instead (`write_jsonl_atomic`).
    """
    if not path.exists():
        return
    repair_jsonl(path)
    records = list(read_jsonl(path))
    drop = [r.get("step", 0) > step for r in records]
    if not any(drop):
        return
    first = drop.index(True)
    if not all(drop[first:]):
        write_jsonl_atomic(path, [r for r, d in zip(records, drop, strict=True) if not d])
        return
    with path.open("rb+") as f:
        cut = seen = 0
        for raw in f:  # the byte where record `first` starts (read_jsonl skips blank lines)
            if raw.strip():
                if seen == first:
                    break
                seen += 1
            cut += len(raw)
        f.truncate(cut)
        os.fsync(f.fileno())


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every metrics line of a run, in order."""
    return list(read_jsonl(path))


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
