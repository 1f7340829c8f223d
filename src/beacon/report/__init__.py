"""Every report of a run folder: the room above eval and training that reads what they wrote.

- `markdown`: the one markdown table writer and interval format (`61.2 [58.0, 64.1]`) of every
  report, the demo's included, and the one writer of report.md beside report.json.
- `eval_runs`: report.md, report.json and plots/ of one or more `beacon eval` run folders
  (tables recomputed from samples.jsonl), and the report `beacon eval` writes at the end.
- `figures`: the eval report's figures, and the look every report figure shares.
- `train_runs`: learning curves and health alarms of training run folders.
- `cli`: `beacon report RUN [RUN ...]`, which picks the eval or the training report.

A run folder's files are read through `beacon.runfolder` (`read_run_config`, `read_summary`).
Nothing below this room imports it (`tests/test_layers.py`); the demo's report
(`beacon.demo.report`) is built from its pieces.
"""
