"""Test fixtures: code that only tests and `benchmarks/` run, kept in the package so downstream
tests and the benchmark scripts can import it. Not for real models.

- `logits`: logits processors that steer a random tiny model (`ScriptedTokens`, `ScriptChoice`,
  `synth_choices`, `NoEndOfSequence`);
- `trajectories`: scripted Thyme-format trajectories and synthetic images.

The rule (guarded by `tests/test_layers.py`): the product imports nothing from `beacon.fakes`.
The one exception is the re-export shims at the old public paths (`beacon.testing`,
`beacon.engines.hf.ScriptedTokens`), kept for one release with a DeprecationWarning.

Scripted stand-ins that users run by name are product features and live in the product, not here:
`beacon data scripted-expert` (`beacon.data.scripted`), the scripted critic that OPD serves when
the config says `critic.kind: scripted` (`beacon.revue.scripted`), the OpenAI-compatible server
both answer through (`beacon.engines.scripted_server`), the demo's expert and teacher, and the
tiny model builder (`beacon tiny make`, `model: tiny`, `beacon.engines.tiny`).
"""
