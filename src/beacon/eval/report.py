"""Re-exports of `beacon.report.eval_runs`, kept for one release: import from there."""

from beacon.report.eval_runs import *  # noqa: F403
from beacon.runfolder import CONFIG_FILE, SUMMARY_FILE  # noqa: F401
