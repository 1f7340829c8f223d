"""Typed configs: dataclasses + YAML files + ``--set a.b.c=value`` overrides.

Every setting is declared once, in a dataclass field with its default and a trailing ``#`` comment
that is its documentation (STYLE.md §5). Loading keeps nanoGPT's two rules (unknown keys and
mismatched types are errors) and torchtune's ``ConfigError`` pattern (every problem in the file is
collected and raised together)::

    cfg = load_config(EvalConfig, path="configs/eval/vstar.yaml", overrides=["engine.name=hf"])
    text = to_yaml(cfg)   # the resolved config; load_config reads it back to an equal object

Field types: nested dataclasses, ``int``, ``float`` (ints accepted), ``bool``, ``str``, ``Path``,
``Literal[...]``, ``list[X]``, ``tuple[X, ...]``, ``tuple[A, B]``, ``dict[str, X]``, ``X | None``
and other unions, ``Any``.

Semantics worth knowing:

1. A mapping for a nested dataclass is laid over that field's default, so a file may set one key of
   a section. A list or dict given in a file replaces the default whole; ``--set a.d.k=v`` adds or
   replaces one key of a dict field.
2. ``--set`` values are YAML (``modes=[tool,notool]``, ``x=null``). For ``str``/``Path`` fields the
   text is taken verbatim where YAML would read a number or bool (``--set run.name=2024``); ``bool``
   fields take ``true/false/yes/no/1/0`` from ``--set`` (files need real YAML booleans).
3. Exponent floats without a dot (``1e-5``) are floats, as in YAML 1.2; PyYAML's YAML 1.1 rules
   would read them as strings. ``to_yaml`` quotes strings that look like such floats.
4. After types, each dataclass's optional ``validate(self) -> list[str]`` reports cross-field
   problems; they are listed after the type problems, prefixed with the field path.
5. Files under ``configs/`` name their dataclass on the first line,
   ``# config: beacon.eval.runner:EvalConfig`` (read by :func:`config_class_for`).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import difflib
import importlib
import inspect
import io
import json
import re
import textwrap
import tokenize
import types
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

T = TypeVar("T")

_MISSING: Any = dataclasses.MISSING
_INVALID: Any = object()  # marks a value that failed conversion (its problem is already recorded)
_BOOL_WORDS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
_EXP_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
_CLASS_LINE = re.compile(r"^#\s*config:\s*([\w.]+):(\w+)\s*$")


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-5`` as a float (YAML 1.2) instead of a string."""


class _Dumper(yaml.SafeDumper):
    """SafeDumper that quotes strings such as ``"1e-5"``, so that _Loader reads them as strings."""


for _cls in (_Loader, _Dumper):
    _cls.add_implicit_resolver("tag:yaml.org,2002:float", _EXP_FLOAT, list("-+0123456789."))


class ConfigError(ValueError):
    """Every problem found while loading one config, reported together, one per line."""

    def __init__(self, problems: Sequence[str], source: str = "config"):
        self.problems = list(problems)
        self.source = source
        count = len(self.problems)
        header = f"config error in {source} ({count} problem{'' if count == 1 else 's'}):"
        super().__init__("\n".join([header, *(f"  {p}" for p in self.problems)]))

    def __reduce__(self):  # keeps problems and source when pickled across processes
        return ConfigError, (self.problems, self.source)


@dataclasses.dataclass(frozen=True)
class Override:
    """One ``--set`` item: the dotted key split into ``keys``, raw ``text``, YAML ``value``."""

    keys: tuple[str, ...]
    text: str
    value: Any


@dataclasses.dataclass
class _Problems:
    types: list[str] = dataclasses.field(default_factory=list)  # unknown keys, types, missing
    checks: list[str] = dataclasses.field(default_factory=list)  # from validate(), listed last


def parse_overrides(overrides: Sequence[str]) -> list[Override]:
    """Parses ``["a.b=1", "modes=[tool,notool]"]``; raises ConfigError listing every bad item."""
    problems: list[str] = []
    parsed = _parse_overrides(overrides, problems)
    if problems:
        raise ConfigError(problems, "--set overrides")
    return parsed


def load_config(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = ()) -> T:
    """Builds ``cls`` from its defaults, then the YAML file at ``path``, then ``overrides``.

    Raises ConfigError naming every unknown key, wrong type, missing required setting and
    ``validate()`` problem at once.
    """
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"load_config needs a dataclass type, got {cls!r}")
    source = " + ".join(
        ([str(path)] if path is not None else []) + (["--set"] if overrides else [])
    )
    source = source or f"{cls.__name__} defaults"
    raw = _read_yaml(Path(path), cls) if path is not None else {}
    problems = _Problems()
    for override in _parse_overrides(overrides, problems.types):
        _apply_override(raw, cls, override, problems.types)
    config = _convert(raw, cls, "", problems)
    if problems.types or problems.checks:
        raise ConfigError(problems.types + problems.checks, source)
    return config


def to_dict(obj: Any) -> Any:
    """Plain YAML-ready data: dataclasses become dicts, tuples lists, paths strings."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
    if isinstance(obj, Mapping):
        return {key: to_dict(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(value) for value in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def to_yaml(config: Any) -> str:
    """The resolved config as YAML, in field order; ``load_config`` reads it back unchanged."""
    return yaml.dump(to_dict(config), Dumper=_Dumper, sort_keys=False, allow_unicode=True)


def describe(cls: type) -> list[tuple[str, str, str, str]]:
    """One row per setting: (dotted name, type, default, help from the field's ``#`` comment).

    Nested dataclasses are expanded into their own settings; ``(required)`` marks no default.
    """
    return _describe(cls, "", None)


def format_describe(cls: type) -> str:
    """``describe(cls)`` as an aligned text table, for ``--show-config``."""
    rows = [("setting", "type", "default", "help"), *describe(cls)]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(row[i].ljust(widths[i]) for i in range(3)) + "  " + row[3] for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def config_class_for(path: str | Path) -> type | None:
    """The dataclass named by a ``# config: module:Class`` first line, or None without one."""
    with open(path, encoding="utf-8") as file:
        match = _CLASS_LINE.match(file.readline().strip())
    if match is None:
        return None
    cls = getattr(importlib.import_module(match[1]), match[2], None)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise ConfigError([f"first line names {match[1]}:{match[2]}, not a dataclass"], str(path))
    return cls


# ---------------------------------------------------------------- reading files and overrides


def _read_yaml(path: Path, cls: type) -> dict:
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)
    except FileNotFoundError:
        raise ConfigError(["file not found"], str(path)) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"not valid YAML: {' '.join(str(exc).split())}"], str(path)) from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        expected = f"a mapping of {cls.__name__} settings"
        raise ConfigError([f"top level: expected {expected}, got {_show(raw)}"], str(path))
    return raw


def _parse_overrides(overrides: Sequence[str], problems: list[str]) -> list[Override]:
    parsed = []
    for item in overrides:
        key, sep, text = item.partition("=")
        keys = tuple(part.strip() for part in key.split("."))
        if not sep or not all(keys):
            problems.append(
                f"--set {item}: expected key=value with a dotted key, e.g. engine.name=hf"
            )
            continue
        try:
            parsed.append(Override(keys, text.strip(), yaml.load(text, Loader=_Loader)))
        except yaml.YAMLError as exc:
            problems.append(f"--set {item}: value is not valid YAML ({str(exc).splitlines()[0]})")
    return parsed


def _apply_override(raw: dict, cls: type, override: Override, problems: list[str]) -> None:
    """Puts the Override object at its place in the raw tree; _convert reads it by the field type.

    Missing sections are created on the way: ``{}`` for a dataclass (laid over its default) and a
    copy of the default for a dict field, so ``--set weights.c=1`` keeps the other keys.
    """
    node, tp, default = raw, cls, None
    for depth, key in enumerate(override.keys[:-1]):
        tp, default = _child_type(tp, key, default)
        child = node.get(key)
        if isinstance(child, Override) and isinstance(child.value, dict):
            child = dict(child.value)
        if not isinstance(child, dict):
            if tp is not None and not _is_section(tp):
                section = ".".join(override.keys[: depth + 1])
                problems.append(
                    f"--set {'.'.join(override.keys)}: {section} has type {_type_name(tp)}, not a "
                    f"section of settings; set it whole, e.g. --set {section}=..."
                )
                return
            child = to_dict(default) if isinstance(default, dict) else {}
        node[key] = child
        node = child
    node[override.keys[-1]] = override


def _child_type(tp: Any, key: str, default: Any) -> tuple[Any, Any]:
    """(type, default) of ``key`` inside a section of type ``tp``; (None, None) if unknown."""
    tp = _strip_none(tp)
    if _is_dataclass_type(tp):
        field = {f.name: f for f in dataclasses.fields(tp) if f.init}.get(key)
        if field is not None:
            child_default = _field_default(field, default if isinstance(default, tp) else None)
            return _hints(tp)[key], None if child_default is _MISSING else child_default
    if get_origin(tp) is dict:
        value_tp = get_args(tp)[1] if get_args(tp) else Any
        return value_tp, default.get(key) if isinstance(default, dict) else None
    return None, None


def _from_cli(override: Override, tp: Any) -> Any:
    """The value of a ``--set`` item for a field of type ``tp`` (see module docstring, point 2)."""
    text, value = override.text, override.value
    if tp is bool and text.lower() in _BOOL_WORDS:
        return _BOOL_WORDS[text.lower()]
    if tp in (str, Path) and (isinstance(value, (bool, int, float)) or text == ""):
        return text
    if get_origin(tp) is Literal and text in get_args(tp):
        return text
    return value


# ------------------------------------------------------------------------------- conversion


def _convert(value: Any, tp: Any, path: str, problems: _Problems, default: Any = None) -> Any:
    """``value`` checked against ``tp``; on a mismatch records a problem and returns _INVALID."""
    origin = get_origin(tp)
    if isinstance(value, Override) and origin not in (Union, types.UnionType):
        value = _from_cli(value, tp)  # a union reads the text once per arm, in _convert_union
    if tp is Any:
        return value
    if _is_dataclass_type(tp):
        return _convert_dataclass(value, tp, path, problems, default)
    if origin in (Union, types.UnionType):
        return _convert_union(value, tp, path, problems, default)
    if origin is Literal:
        if any(value == allowed and type(value) is type(allowed) for allowed in get_args(tp)):
            return value
        allowed = ", ".join(_show(a) for a in get_args(tp))
        return _bad(problems, path, f"one of {allowed}", value)
    if origin is list:
        return _convert_list(value, tp, path, problems)
    if origin is tuple:
        return _convert_tuple(value, tp, path, problems)
    if origin is dict:
        return _convert_dict(value, tp, path, problems)
    return _convert_scalar(value, tp, path, problems)


def _convert_dataclass(value: Any, cls: type, path: str, problems: _Problems, default: Any) -> Any:
    if value is None:  # a YAML section left empty (``engine:``) keeps its defaults
        value = {}
    if not isinstance(value, Mapping):
        return _bad(problems, path, f"a mapping of {cls.__name__} settings", value)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    problems.types.extend(_unknown_key(path, key, fields) for key in value if key not in fields)
    base = default if isinstance(default, cls) else None
    kwargs = {}
    for name, field in fields.items():
        field_path = _join(path, name)
        field_default = _field_default(field, base)
        if name in value:
            kwargs[name] = _convert(
                value[name], _hints(cls)[name], field_path, problems, field_default
            )
        elif field_default is not _MISSING:
            kwargs[name] = field_default
            _validate_tree(field_default, field_path, problems)
        else:
            problems.types.append(
                f"{field_path}: missing required setting ({_type_name(_hints(cls)[name])}); "
                f"set it in the file or with --set {field_path}=..."
            )
            kwargs[name] = _INVALID
    if any(v is _INVALID for v in kwargs.values()):
        return _INVALID
    try:
        config = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        problems.types.append(f"{path or 'top level'}: {exc}")
        return _INVALID
    _run_validate(config, path, problems)
    return config


def _convert_union(value: Any, tp: Any, path: str, problems: _Problems, default: Any) -> Any:
    arms = get_args(tp)
    plain = value.value if isinstance(value, Override) else value
    if plain is None and type(None) in arms:
        return None
    real_arms = [arm for arm in arms if arm is not type(None)]
    if len(real_arms) == 1:  # X | None with a value: report X's own problems, they are sharper
        return _convert(value, real_arms[0], path, problems, default)
    for arm in real_arms:
        trial = _Problems()
        converted = _convert(value, arm, path, trial, default)
        if not trial.types:
            problems.checks.extend(trial.checks)
            return converted
    return _bad(problems, path, _type_name(tp), plain)


def _convert_list(value: Any, tp: Any, path: str, problems: _Problems) -> Any:
    if not isinstance(value, list):
        return _bad(problems, path, _type_name(tp), value)
    item_tp = get_args(tp)[0] if get_args(tp) else Any
    items = [_convert(v, item_tp, f"{path}[{i}]", problems) for i, v in enumerate(value)]
    return _INVALID if any(item is _INVALID for item in items) else items


def _convert_tuple(value: Any, tp: Any, path: str, problems: _Problems) -> Any:
    """``tuple[X, ...]`` or ``tuple[A, B]``, written as a YAML list."""
    args = get_args(tp)
    variadic = len(args) == 2 and args[1] is ...
    if not isinstance(value, list) or not (variadic or len(value) == len(args)):
        return _bad(problems, path, _type_name(tp), value)
    item_types = [args[0]] * len(value) if variadic else args
    items = [
        _convert(v, t, f"{path}[{i}]", problems)
        for i, (v, t) in enumerate(zip(value, item_types, strict=True))
    ]
    return _INVALID if any(item is _INVALID for item in items) else tuple(items)


def _convert_dict(value: Any, tp: Any, path: str, problems: _Problems) -> Any:
    if not isinstance(value, Mapping):
        return _bad(problems, path, _type_name(tp), value)
    key_tp, value_tp = get_args(tp) if get_args(tp) else (Any, Any)
    converted = {
        _convert(key, key_tp, f"{_join(path, str(key))} (key)", problems): _convert(
            item, value_tp, _join(path, str(key)), problems
        )
        for key, item in value.items()
    }
    if _INVALID in converted or _INVALID in converted.values():
        return _INVALID
    return converted


def _convert_scalar(value: Any, tp: Any, path: str, problems: _Problems) -> Any:
    if tp not in (int, float, bool, str, Path, type(None)):
        raise TypeError(f"config field {path} has a type the config loader does not read: {tp!r}")
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is Path and isinstance(value, (str, Path)):
        return Path(value)
    if type(value) is tp or (tp is type(None) and value is None):
        return value
    return _bad(problems, path, _type_name(tp), value)


def _run_validate(config: Any, path: str, problems: _Problems) -> None:
    validate = getattr(config, "validate", None)
    if callable(validate):
        problems.checks.extend(f"{path}: {msg}" if path else msg for msg in validate())


def _validate_tree(value: Any, path: str, problems: _Problems) -> None:
    """Runs validate() on a default value and everything inside it (defaults skip _convert)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            _validate_tree(getattr(value, field.name), _join(path, field.name), problems)
        _run_validate(value, path, problems)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _validate_tree(item, f"{path}[{i}]", problems)
    elif isinstance(value, dict):
        for key, item in value.items():
            _validate_tree(item, _join(path, str(key)), problems)


# ---------------------------------------------------------------------------------- helpers


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _is_section(tp: Any) -> bool:
    tp = _strip_none(tp)
    return tp is Any or _is_dataclass_type(tp) or get_origin(tp) is dict


def _strip_none(tp: Any) -> Any:
    if get_origin(tp) in (Union, types.UnionType):
        arms = [arm for arm in get_args(tp) if arm is not type(None)]
        if len(arms) == 1:
            return arms[0]
    return tp


def _field_default(field: dataclasses.Field, base: Any) -> Any:
    """The field's default: taken from ``base`` (the parent field's default) when there is one."""
    if base is not None:
        return copy.deepcopy(getattr(base, field.name))
    if field.default is not _MISSING:
        return field.default
    if field.default_factory is not _MISSING:
        return field.default_factory()
    return _MISSING


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _bad(problems: _Problems, path: str, expected: str, value: Any) -> Any:
    problems.types.append(f"{path or 'top level'}: expected {expected}, got {_show(value)}")
    return _INVALID


def _unknown_key(path: str, key: Any, fields: Mapping[str, Any]) -> str:
    close = difflib.get_close_matches(str(key), list(fields), n=1)
    if close:
        return f"{_join(path, str(key))}: unknown key; did you mean {_join(path, close[0])}?"
    return f"{_join(path, str(key))}: unknown key; valid keys: {', '.join(fields)}"


def _show(value: Any) -> str:
    text = json.dumps(to_dict(value), default=str, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if tp is type(None):
        return "null"
    if tp is Any:
        return "any"
    if tp is Path:
        return "path"
    if _is_dataclass_type(tp):
        return tp.__name__
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(arm) for arm in get_args(tp))
    if origin is Literal:
        return " | ".join(_show(allowed) for allowed in get_args(tp))
    if origin in (list, dict, tuple):
        args = ", ".join("..." if arg is ... else _type_name(arg) for arg in get_args(tp))
        return f"{origin.__name__}[{args}]"
    return getattr(tp, "__name__", str(tp))


def _describe(cls: type, prefix: str, base: Any) -> list[tuple[str, str, str, str]]:
    rows = []
    helps = _field_comments(cls)
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        tp = _hints(cls)[field.name]
        default = _field_default(field, base if isinstance(base, cls) else None)
        if _is_dataclass_type(tp):
            rows += _describe(tp, f"{prefix}{field.name}.", default)
            continue
        shown = "(required)" if default is _MISSING else _show(default)
        rows.append((prefix + field.name, _type_name(tp), shown, helps.get(field.name, "")))
    return rows


@cache
def _field_comments(cls: type) -> dict[str, str]:
    """Field name -> its ``#`` comment, over the dataclass bases too (subclasses win)."""
    helps: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            helps.update(_class_comments(klass))
    return helps


def _class_comments(cls: type) -> dict[str, str]:
    """Comments on a field's own lines, else the full-line comments just above it."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # defined in a REPL or exec'd: no source to read
        return {}
    lines = source.splitlines()
    comments = {
        token.start[0]: token.string.lstrip("#").strip()
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }
    helps = {}
    for stmt in ast.parse(source).body[0].body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        own = [comments[n] for n in range(stmt.lineno, stmt.end_lineno + 1) if n in comments]
        above, line = [], stmt.lineno - 1
        while line in comments and lines[line - 1].lstrip().startswith("#"):
            above.insert(0, comments[line])
            line -= 1
        helps[stmt.target.id] = " ".join(own or above)
    return helps
