"""Layering (issue 7 §4): rooms import only rooms below them; no two modules import each other."""

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
