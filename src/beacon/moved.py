"""Old import paths of moved modules, kept working for one release without files left behind.

`MOVED` maps each old module path to where its code lives now. `MovedPaths`, a finder on
`sys.meta_path` (installed by `beacon/__init__.py`), answers an import of an old path: it imports
the new module and registers it under the old name too, so `beacon.rl.loss` *is*
`beacon.train.grpo.policy`, and warns (DeprecationWarning) with the path to import from. An old path
whose names went to several modules (a package's re-exports, `beacon.rl.scoring`) becomes a small
module that finds each name in those modules on first use. Any other path is not found, as before.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any

MOVED: dict[str, str | tuple[str, ...]] = {
    # GRPO's maths: beacon.rl -> train/grpo; what OPD shares -> train/core
    "beacon.rl.advantages": "beacon.train.grpo.group_scoring",
    "beacon.rl.filtering": "beacon.train.grpo.group_scoring",
    "beacon.rl.stats": "beacon.train.grpo.group_scoring",
    "beacon.rl.scoring": ("beacon.train.grpo.group_scoring", "beacon.train.core.outcomes"),
    "beacon.rl.rewards": "beacon.train.grpo.rewards",
    "beacon.rl.format": "beacon.train.core.outcomes",
    "beacon.rl.config": "beacon.train.grpo.config",
    "beacon.rl.loss": "beacon.train.grpo.policy",
    "beacon.rl.hgce": "beacon.train.grpo.hints",
    "beacon.rl.hints": "beacon.train.grpo.hints",
    "beacon.rl.groups": "beacon.train.core.outcomes",
    "beacon.rl.difficulty": "beacon.train.core.outcomes",
    "beacon.rl.health": "beacon.train.core.health",
    "beacon.rl.sequences": "beacon.train.core.encode",
    "beacon.rl": (
        "beacon.train.grpo.group_scoring",
        "beacon.train.grpo.rewards",
        "beacon.train.grpo.config",
        "beacon.train.grpo.policy",
        "beacon.train.grpo.hints",
        "beacon.train.core.outcomes",
        "beacon.train.core.health",
        "beacon.train.core.encode",
    ),
    # ReVuE's maths: beacon.revue -> train/opd; its analyses -> the report room
    "beacon.revue.assemble": "beacon.train.opd.assemble",
    "beacon.revue.stats": "beacon.train.opd.assemble",
    "beacon.revue.conditioning": "beacon.train.opd.score",
    "beacon.revue.config": "beacon.train.opd.config",
    "beacon.revue.critic": "beacon.train.opd.critic",
    "beacon.revue.http": "beacon.train.opd.critic",
    "beacon.revue.critic_output": "beacon.train.opd.critic_schema",
    "beacon.revue.critic_prompts": "beacon.train.opd.critic_prompts",
    "beacon.revue.weights": "beacon.train.opd.revue_loss",
    "beacon.revue.impact": "beacon.train.opd.revue_loss",
    "beacon.revue.loss": "beacon.train.opd.revue_loss",
    "beacon.revue.states": "beacon.train.opd.critic_schema",
    "beacon.revue.verdicts": "beacon.train.opd.critic_schema",
    "beacon.revue.teacher": "beacon.train.opd.revue_loss",
    "beacon.revue.support": "beacon.train.opd.revue_loss",
    "beacon.revue.scripted": "beacon.train.opd.scripted_critic",
    "beacon.revue.cli": "beacon.report.revue_analysis",
    "beacon.revue": (
        "beacon.train.opd.assemble",
        "beacon.train.opd.score",
        "beacon.train.opd.config",
        "beacon.train.opd.critic",
        "beacon.train.opd.critic_schema",
        "beacon.train.opd.critic_prompts",
        "beacon.train.opd.revue_loss",
    ),
    # test fixtures
    "beacon.testing": "beacon.fakes",
    "beacon.testing.script_choice": "beacon.fakes.logits",
    "beacon.testing.trajectories": "beacon.fakes.trajectories",
    # renamed so that no two files share a name
    "beacon.train.core.loop": "beacon.train.core.train_loop",
    "beacon.train.core.trackers": "beacon.train.core.metrics",
    "beacon.train.core.lora_weights": "beacon.train.core.setup",
    "beacon.train.opd.health": "beacon.train.opd.score",
    "beacon.train.opd.teacher": "beacon.train.opd.teacher_server",
    "beacon.data.hints": "beacon.data.hint_writing",
    "beacon.data.scripted": "beacon.data.scripted_expert",
    "beacon.data.stages": "beacon.data.eval_stages",
    "beacon.demo.stages": "beacon.demo.pipeline",
    "beacon.demo.teacher": "beacon.demo.teacher_data",
    # merged so that a training step reads in fewer files
    "beacon.rollout.checks": "beacon.rollout",
    "beacon.rollout.episodes": "beacon.rollout",
    "beacon.rollout.groups": "beacon.rollout",
    "beacon.train.core.memory_check": "beacon.train.core.memory",
    "beacon.train.core.memory_plan": "beacon.train.core.memory",
    "beacon.train.core.weight_sync": "beacon.train.core.setup",
    "beacon.train.opd.conditioning": "beacon.train.opd.score",
    "beacon.train.opd.critic_output": "beacon.train.opd.critic_schema",
    "beacon.train.opd.states": "beacon.train.opd.critic_schema",
    "beacon.train.opd.impact_weights": "beacon.train.opd.revue_loss",
    "beacon.train.opd.topk": "beacon.train.opd.revue_loss",
    # the reports, in one room
    "beacon.eval.report": ("beacon.report.eval_runs", "beacon.runfolder"),
    "beacon.eval.plots": "beacon.report.figures",
    "beacon.train.report": "beacon.report.train_runs",
}
"""Old module path -> the module now holding its code (or the modules its names went to)."""


def _spread_getattr(old: str, news: Sequence[str]) -> Any:
    """A module `__getattr__` that finds a name of `old` in the modules its names went to."""

    def getattr_(name: str) -> Any:
        if name.startswith("__"):  # `inspect` and friends probe every module's dunders
            raise AttributeError(name)
        for new in news:
            module = importlib.import_module(new)
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {old!r} (moved to {', '.join(news)}) has no {name!r}")

    return getattr_


class MovedPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves the old paths in `MOVED` (see the module's docstring)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default empty module; `exec_module` replaces or fills it

    def exec_module(self, module: ModuleType) -> None:
        old = module.__name__
        new = MOVED[old]
        where = new if isinstance(new, str) else ", ".join(new)
        warnings.warn(
            f"{old} moved to {where}; import from there (the old path goes after one release)",
            DeprecationWarning,
            stacklevel=2,
        )
        if isinstance(new, str):
            # the import system returns what sys.modules holds under the old name after this
            sys.modules[old] = importlib.import_module(new)
        else:
            module.__getattr__ = _spread_getattr(old, new)  # type: ignore[method-assign]


def install() -> None:
    """Put one `MovedPaths` first on `sys.meta_path` (a second call changes nothing). First: the
    old name of a module under a moved package (`beacon.testing.trajectories`, with
    `beacon.testing` being `beacon.fakes`) would otherwise be found again by the path finder in
    the new package's folder, a second copy of the module. It shadows nothing: no old path has a
    file (tests/test_moved.py)."""
    if not any(isinstance(finder, MovedPaths) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedPaths())
