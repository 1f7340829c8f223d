"""Test fixtures: code that only tests and `benchmarks/` run, kept in the package so downstream
tests and the benchmark scripts can import it. Not for real models.

- `logits`: logits processors that steer a random tiny model (`ScriptedTokens`, `ScriptChoice`,
  `synth_choices`, `NoEndOfSequence`);
- `trajectories`: scripted Thyme-format trajectories and synthetic images.

The rule (guarded by `tests/test_layers.py`): the product imports nothing from `beacon.fakes`.
The one exception is `beacon.engines.hf.ScriptedTokens`, a re-export at its old public path kept
for one release with a DeprecationWarning; the fixtures' old package name resolves here through
`beacon.moved`.

Scripted stand-ins that users run by name are product features and live in the product, not here:
`beacon data scripted-expert` (`beacon.data.scripted_expert`), the scripted critic that OPD serves
when the config says `critic.kind: scripted` (`beacon.train.opd.scripted_critic`), the
OpenAI-compatible server both answer through (`beacon.engines.scripted_server`), the demo's expert
and teacher, and the tiny model builder (`beacon tiny make`, `model: tiny`, `beacon.engines.tiny`).
"""
