"""The one place a step's metrics dict is built, and where it is written.

`step_metrics` builds the dict every recipe logs; recipes add their own keys through `extra`
(GRPO rewards, ReVuE weights) so no key is assembled anywhere else. `MetricsLogger` writes it
to `metrics.jsonl` always and to TensorBoard when `tensorboard` is installed, and drives the
progress bar (loss, tokens/s, ETA), on the main process only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from beacon.jsonl import JsonlWriter, read_jsonl, write_jsonl_atomic
from beacon.rollout.checks import CHECK_REASONS

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"


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
    """JSONL (always), TensorBoard (when installed and enabled), tqdm bar; main process only."""

    def __init__(
        self,
        run_dir: Path,
        enabled: bool,
        total_steps: int,
        start_step: int,
        tensorboard: bool = True,
        progress_bar: bool = True,
    ) -> None:
        self.enabled = enabled
        self.path = run_dir / METRICS_FILE
        self._bar = self._tb = None
        if not enabled:
            return
        truncate_after(self.path, start_step)
        self._lines = JsonlWriter(self.path)
        if tensorboard:
            self._tb = _tensorboard_writer(run_dir / "tensorboard")
        if progress_bar:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total_steps, initial=start_step, desc="train", unit="step")

    def log(self, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self._lines.write(metrics)
        if self._tb is not None:
            for key, value in metrics.items():
                if isinstance(value, int | float) and key != "step":
                    self._tb.add_scalar(f"train/{key}", value, metrics["step"])

    def advance(self, metrics: dict[str, Any]) -> None:
        """Move the bar one step, showing loss and throughput."""
        if self._bar is not None:
            self._bar.set_postfix(
                loss=f"{metrics['loss']:.4f}", tok_s=f"{metrics['tokens_per_s']:.0f}"
            )
            self._bar.update(1)

    def close(self) -> None:
        if not self.enabled:
            return
        self._lines.close()
        if self._bar is not None:
            self._bar.close()
        if self._tb is not None:
            self._tb.close()


def truncate_after(path: Path, step: int) -> None:
    """Drop lines of steps after `step` (and a torn last line): a resumed run rewrites them."""
    if path.exists():
        write_jsonl_atomic(path, [r for r in read_jsonl(path) if r.get("step", 0) <= step])


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every metrics line of a run, in order."""
    return list(read_jsonl(path))


def _tensorboard_writer(folder: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        logger.info("tensorboard is not installed; metrics go to %s only", METRICS_FILE)
        return None
    return SummaryWriter(log_dir=str(folder))
