"""The old import paths of moved modules (`beacon.moved.MOVED`) work for one release: each
imports, is the new module itself (or finds its names in the modules they went to), and warns
with the new path; a path that never existed is still not found; no old path has a file left."""

from __future__ import annotations

import importlib
import sys
import warnings
from pathlib import Path

import pytest

import beacon
from beacon.moved import MOVED

SRC = Path(beacon.__file__).resolve().parent


def forget(old: str) -> None:
    """Drop `old` and its submodules from sys.modules, so that importing it runs the finder."""
    for name in [m for m in sys.modules if m == old or m.startswith(old + ".")]:
        del sys.modules[name]


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_imports_the_new_module_with_a_warning(old: str) -> None:
    new = MOVED[old]
    forget(old)
    first = new if isinstance(new, str) else new[0]
    with pytest.warns(DeprecationWarning, match=first.replace(".", r"\.")):
        module = importlib.import_module(old)
    assert sys.modules[old] is module
    if isinstance(new, str):
        assert module is importlib.import_module(new)
    else:  # names spread over several modules: each public name of each is found
        for target in new:
            public = [n for n in dir(importlib.import_module(target)) if not n.startswith("_")]
            for name in public:
                assert hasattr(module, name), f"{old}.{name}"


def test_names_of_a_spread_package_are_the_new_objects() -> None:
    from beacon.train.core.outcomes import GroupOutcomes, group_outcomes
    from beacon.train.grpo.group_scoring import score_groups

    forget("beacon.rl")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from beacon.rl import GroupOutcomes as old_outcomes
        from beacon.rl.scoring import group_outcomes as old_group_outcomes
        from beacon.rl.scoring import score_groups as old_score_groups
    assert old_outcomes is GroupOutcomes
    assert old_group_outcomes is group_outcomes and old_score_groups is score_groups


def test_a_path_that_never_existed_is_not_found() -> None:
    for missing in ("beacon.rl.no_such_module", "beacon.no_such_room", "beacon.revue.nothing"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            with pytest.raises(ModuleNotFoundError):
                importlib.import_module(missing)
    forget("beacon.rl")
    with pytest.warns(DeprecationWarning):
        rl = importlib.import_module("beacon.rl")
    with pytest.raises(AttributeError, match="no_such_name"):
        rl.no_such_name  # noqa: B018


def test_no_old_path_has_a_file_left() -> None:
    """A file at an old path would shadow the table (and keep the repeated name)."""
    left = [
        old
        for old in MOVED
        if (SRC.parent / Path(*old.split("."))).with_suffix(".py").exists()
        or (SRC.parent / Path(*old.split("."))).is_dir()
    ]
    assert left == []
