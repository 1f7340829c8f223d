"""Layering (issue 7 §4): rooms import only rooms below them; no two modules import each other;
the product imports nothing from `beacon.fakes` (the rule in its docstring).

`FLOORS` declares the house from the ground up. A module imports its own room and the rooms of
lower floors, and rooms that share a floor (their modules still import no cycle). Two named
exceptions: a room's command module (`ROOM/cli.py`) may import the report room, which renders
what the command ran (`beacon eval` writes its report.md); and the re-export modules kept for
one release: none is a file (`beacon.moved` resolves them), and `tests/test_moved.py` checks that
none is left behind.
"""

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


FLOORS: tuple[tuple[str, ...], ...] = (
    ("beacon", "moved", "errors", "types", "files", "config", "configs", "jsonl", "images",
     "runfolder", "progress", "blocks", "metrics", "stages"),
    ("sandbox", "engines"),
    ("agent", "verify", "fakes"),
    ("benchmarks", "rollout"),
    ("eval", "annotate"),
    ("train", "data"),
    ("report",),
    ("demo",),
    ("cli", "__main__"),
)  # fmt: skip
"""Rooms (`beacon.ROOM`; `beacon` is the package's own `__init__`), one floor a line, ground
first: the report room sits above eval and training and below the demo that uses its pieces.
GRPO's and ReVuE's maths live in their trainers' rooms (`train/grpo`, `train/opd`); the old
paths of moved modules resolve through `beacon.moved`, which holds no module of its own."""

FLOOR = {room: level for level, rooms in enumerate(FLOORS) for room in rooms}


def room_of(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in (SRC / "beacon").rglob("*.py")}


def test_every_room_has_a_floor() -> None:
    """A new room must be placed on a floor before it can be imported from anywhere."""
    assert {room_of(m) for m in modules()} - set(FLOOR) == set()


def test_no_import_runs_up_the_house() -> None:
    upward = []
    for module, path in modules().items():
        for target in imports_of(path):
            if target in DEPRECATED_SHIMS.get(module, set()):
                continue  # an old path re-exporting a fake for one release
            command_shows_report = module.endswith(".cli") and room_of(target) == "report"
            if FLOOR[room_of(target)] > FLOOR[room_of(module)] and not command_shows_report:
                upward.append(f"{module} -> {target}")
    assert upward == []


def test_nothing_below_the_report_room_imports_it() -> None:
    """Stated on its own because it is the arrow that used to come back: the eval command read
    training runs, the eval runner drew plots."""
    report = FLOOR["report"]
    below = [
        f"{module} -> {target}"
        for module, path in modules().items()
        if FLOOR[room_of(module)] < report and not module.endswith(".cli")
        for target in imports_of(path)
        if room_of(target) == "report"
    ]
    assert below == []


def test_file_names_say_what_they_hold() -> None:
    """At most 6 file names repeat across the product (command, config and recipe modules and
    package `__init__`s aside), and none of the names a training step reads."""
    ignored = {"__init__.py", "cli.py", "config.py", "recipe.py"}
    seen: dict[str, list[str]] = {}
    for path in (SRC / "beacon").rglob("*.py"):
        if path.name not in ignored:
            seen.setdefault(path.name, []).append(module_name(path))
    repeats = {name: where for name, where in seen.items() if len(where) > 1}
    on_a_step = {"teacher", "critic", "health", "loss", "hints", "stats", "groups", "scoring",
                 "episode", "loop", "weights"}  # fmt: skip
    assert len(repeats) <= 6, repeats
    assert {name.removesuffix(".py") for name in repeats} & on_a_step == set(), repeats


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
    "beacon.engines.hf": {"beacon.fakes.logits"},  # ScriptedTokens, in the module's __getattr__
}
"""The re-export at an old public name, kept for one release: the only product module that may
import fakes, and only the module it re-exports."""


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


def local_beacon_imports(tree: ast.Module) -> list[ast.stmt]:
    """The `beacon` imports inside functions, in source order."""
    found = {
        node
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(fn)
        if (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("beacon"))
        or (isinstance(node, ast.Import) and node.names[0].name.startswith("beacon"))
    }
    return sorted(found, key=lambda n: n.lineno)


def test_function_local_imports_say_why() -> None:
    """Imports sit at the top of their module, where a reader sees a module's edges; one inside
    a function needs a reason, written on the line above it as `# lazy: ...`: a package it keeps
    out of `beacon --help` (torch, transformers, matplotlib, fastapi, aiohttp), or the cycle it
    breaks. A run of such imports shares one comment."""
    unexplained = []
    for module, path in modules().items():
        lines = path.read_text(encoding="utf-8").splitlines()
        nodes = local_beacon_imports(ast.parse("\n".join(lines)))
        ends = {n.end_lineno for n in nodes}
        for node in nodes:
            above = lines[node.lineno - 2].strip()
            if not above.startswith("# lazy: ") and node.lineno - 1 not in ends:
                unexplained.append(f"{module}:{node.lineno}")
    assert unexplained == []
