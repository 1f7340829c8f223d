"""The configs that ship inside the package, found by name: ``grpo_tiny``, ``synth_tiny``, ``fsdp``.

Every config the docs use lives here, in one folder per job (``eval/``, ``data/``, ``train/``,
``accelerate/``), so a wheel install has them too. A config's name is its file name without
``.yaml``; names are unique across the folders (a test checks), so ``--config grpo_tiny`` needs
no folder. ``beacon configs list`` shows them, ``beacon configs cp NAME [DEST]`` copies one out
to edit, and every ``--config`` option takes a name where it takes a path
(:func:`resolve_config`): a file that exists wins, so a local ``grpo_tiny`` file shadows the
shipped one.

Beacon's own configs start with ``# config: module:Class`` (``beacon.config.config_class_for``)
and a comment line saying what the config is for; the ``accelerate/`` ones are accelerate's
``--config_file`` format, copied out with ``beacon configs cp fsdp .`` before launching.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from beacon.errors import UserError

SUFFIX = ".yaml"


@dataclass(frozen=True)
class ShippedConfig:
    """One shipped config: its ``name``, file ``path``, ``kind`` (folder) and ``summary``."""

    name: str
    path: Path
    kind: str
    summary: str


def root() -> Path:
    """The folder the shipped configs lie in (inside the installed package)."""
    return Path(__file__).parent


def shipped() -> dict[str, ShippedConfig]:
    """Every shipped config by name, sorted by folder, then name."""
    found = sorted(root().rglob(f"*{SUFFIX}"), key=lambda p: (p.parent.name, p.name))
    return {p.stem: ShippedConfig(p.stem, p, p.parent.name, _summary(p)) for p in found}


def _summary(path: Path) -> str:
    """The file's first comment line after the ``# config:`` line: what the config is for."""
    for line in path.read_text(encoding="utf-8").splitlines():
        text = line.lstrip("#").strip()
        if not line.startswith("#"):
            break
        if text and not text.startswith("config:"):
            return text.rstrip(":.")
    return ""


def config_path(name: str) -> Path:
    """The file of the shipped config ``name`` (``.yaml`` optional); UserError naming the
    closest names when there is none."""
    configs = shipped()
    stem = name.removesuffix(SUFFIX)
    if stem in configs:
        return configs[stem].path
    close = difflib.get_close_matches(Path(stem).name, list(configs), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}? " if close else ""
    raise UserError(
        f"no shipped config is named {stem!r}; {hint}shipped configs: {', '.join(configs)} "
        "(`beacon configs list` says what each is for)"
    )


def resolve_config(value: str | Path) -> Path:
    """What a ``--config`` value names: the file, if it exists, else the shipped config of that
    name (UserError with the closest names if there is neither)."""
    path = Path(value)
    if path.exists():
        return path
    try:
        return config_path(str(value))
    except UserError as exc:
        raise UserError(f"{value}: file not found, and {exc}") from None
