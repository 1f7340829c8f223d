"""Layering (issue 7 §4): rooms import only rooms below them; no two modules import each other;
the product imports nothing from `beacon.fakes` (the rule in its docstring)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def imports_of(path: Path) -> set[str]:
    """Every ``beacon.*`` module a file imports at run time, lazy imports included (imports
    under ``if TYPE_CHECKING:`` are for annotations only and are left out)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    type_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("beacon"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("beacon"))
    return found


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")


def test_agent_and_engines_do_not_import_eval() -> None:
    for room in ("agent", "engines", "sandbox", "verify"):
        for path in (SRC / "beacon" / room).rglob("*.py"):
            upward = {m for m in imports_of(path) if m.startswith("beacon.eval")}
            assert not upward, f"{module_name(path)} imports {upward}"


def test_no_two_modules_import_each_other() -> None:
    """A package's ``__init__`` re-exporting its modules is not counted (that is its job)."""
    graph = {module_name(p): imports_of(p) for p in (SRC / "beacon").rglob("*.py")}
    cycles = sorted(
        (a, b)
        for a, deps in graph.items()
        for b in deps
        if a < b and a in graph.get(b, set()) and not b.startswith(a + ".")
    )
    assert cycles == []


FAKES = "beacon.fakes"
DEPRECATED_SHIMS = {
    "beacon.testing.script_choice": {"beacon.fakes.logits"},
    "beacon.testing.trajectories": {"beacon.fakes.trajectories"},
    "beacon.engines.hf": {"beacon.fakes.logits"},  # ScriptedTokens, in the module's __getattr__
}
"""The re-exports at the old public paths, kept for one release: the only product modules that
may import fakes, and only the module each re-exports."""


def fakes_imported_by(path: Path) -> set[str]:
    """The `beacon.fakes` modules a file imports, `from beacon import fakes` included."""
    found = {m for m in imports_of(path) if m == FAKES or m.startswith(FAKES + ".")}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "beacon":
            found.update(FAKES for a in node.names if a.name == "fakes")
    return found


def test_the_product_imports_nothing_from_fakes() -> None:
    for path in (SRC / "beacon").rglob("*.py"):
        name = module_name(path)
        if name == FAKES or name.startswith(FAKES + "."):
            continue
        fakes = fakes_imported_by(path)
        assert fakes <= DEPRECATED_SHIMS.get(name, set()), f"{name} imports {fakes}"


def test_the_fakes_rule_catches_an_import(tmp_path: Path) -> None:
    """The check sees the import forms a product module could use."""
    for line in (
        "from beacon.fakes.logits import ScriptChoice",
        "import beacon.fakes",
        "from beacon import fakes",
    ):
        module = tmp_path / "m.py"
        module.write_text(f"def f():\n    {line}\n")
        assert fakes_imported_by(module), line
