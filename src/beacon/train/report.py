"""Re-exports of `beacon.report.train_runs`, kept for one release: import from there."""

from beacon.report.train_runs import *  # noqa: F403
