"""The one place a step's metrics dict is built, and where it is written.

`step_metrics` builds the dict every recipe logs; recipes add their own keys through `extra`
(GRPO rewards, ReVuE weights) so no key is assembled anywhere else. `MetricsLogger` writes it
to `metrics.jsonl` always and to the trackers of `train.report_to` (`trackers`), and drives the
progress display (loss, tokens/s, ETA; `beacon.progress`), on the main process only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from beacon.jsonl import JsonlWriter, read_jsonl, repair_jsonl, write_jsonl_atomic
from beacon.progress import Progress
from beacon.rollout.checks import CHECK_REASONS
from beacon.runfolder import METRICS_FILE
from beacon.train.core.trackers import scalars


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
