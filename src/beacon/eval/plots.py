"""Re-exports of `beacon.report.figures`, kept for one release: import from there."""

from beacon.report.figures import *  # noqa: F403
