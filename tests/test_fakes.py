"""The old public name of a test fixture in the product still works for one release, with a
warning that names the new one (`beacon.fakes`). The fixtures' old module paths resolve through
`beacon.moved` (tests/test_moved.py)."""

from __future__ import annotations

import pytest


def test_scripted_tokens_at_its_old_name_reexports_fakes_with_a_deprecation_warning() -> None:
    import beacon.engines.hf as hf
    from beacon.fakes import logits

    with pytest.warns(DeprecationWarning, match=r"beacon\.fakes\.logits\.ScriptedTokens"):
        assert hf.ScriptedTokens is logits.ScriptedTokens
    with pytest.raises(AttributeError, match="NoSuchThing"):
        hf.NoSuchThing  # noqa: B018
