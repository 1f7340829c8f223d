"""`beacon eval`: evaluate a model with and without tools, resumably.

- `config`: `EvalConfig`, every setting of a run (engine, agent, sandbox, judge, benchmarks,
  modes, K samples) and `OPERATIONAL_KEYS`, the settings outside a run's identity.
- `runner`: `run_eval(cfg)` runs every item x mode x sample through the one agent loop, scores
  it with the benchmark's verifier and appends it to the run folder; rerunning resumes.
- `records`: the typed `SampleRecord` of samples.jsonl and the one JSONL reader (and its policy
  for a torn or corrupt line) that eval, report and resume all use.

Metrics themselves are pure functions in `beacon.metrics`, the reports live in `beacon.report`;
this package only wires and writes.
"""
