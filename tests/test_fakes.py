"""The old public paths of the test fixtures still work for one release, with a warning that
names the new one (`beacon.fakes`)."""

from __future__ import annotations

import importlib
import sys

import pytest


def test_old_fixture_paths_reexport_fakes_with_a_deprecation_warning() -> None:
    from beacon.fakes import logits, trajectories

    for name in [
        m for m in sys.modules if m == "beacon.testing" or m.startswith("beacon.testing.")
    ]:
        del sys.modules[name]
    with pytest.warns(DeprecationWarning, match="beacon.fakes"):
        old_choice = importlib.import_module("beacon.testing.script_choice")
    old_trajectories = importlib.import_module("beacon.testing.trajectories")
    assert old_choice.synth_choices is logits.synth_choices
    assert old_trajectories.scripted_trajectory is trajectories.scripted_trajectory

    import beacon.engines.hf as hf

    with pytest.warns(DeprecationWarning, match=r"beacon\.fakes\.logits\.ScriptedTokens"):
        assert hf.ScriptedTokens is logits.ScriptedTokens
    with pytest.raises(AttributeError, match="NoSuchThing"):
        hf.NoSuchThing  # noqa: B018
