"""Configs: pydantic models + YAML files + ``--set a.b.c=value`` overrides.

Every setting is declared once, in a ``StrictModel`` (pydantic, ``extra="forbid"``) with its
default and a ``Field(description=...)`` that is its documentation (STYLE.md §5). pydantic does
the type checking; this module only merges YAML and ``--set`` into one tree, validates it once
and turns pydantic's errors into our one-line-per-problem ``ConfigError``::

    cfg = load_config(EvalConfig, path="eval_synth.yaml", overrides=["engine.name=hf"])
    text = to_yaml(cfg)   # the resolved config; load_config reads it back to an equal object

Works for any pydantic model. Semantics worth knowing:

1. Types are strict, as nanoGPT's rules want: ``"8"`` is not an int, ``1.0`` is not an int, ``1``
   is a float. Validation runs in pydantic's JSON mode, so YAML lists fill tuples and strings
   fill paths.
2. A mapping for a nested model is laid over that field's default, so a file may set one key of
   a section. A list or dict given in a file replaces the default whole; ``--set a.d.k=v`` adds or
   replaces one key of a dict field.
3. ``--set`` values are YAML (``modes=[tool,notool]``, ``x=null``, ``flag=yes``); where a str
   field rejects the YAML reading of a scalar, the verbatim text is used (``--set
   run.name=2024``).
4. Exponent floats without a dot (``1e-5``) are floats, as in YAML 1.2; PyYAML's YAML 1.1 rules
   would read them as strings. ``to_yaml`` quotes strings that look like such floats.
5. Cross-field checks are ``model_validator(mode="after")`` methods that call
   :func:`raise_problems`; each problem is reported on its own line, prefixed with the model's
   path, together with every type problem.
6. The shipped configs (``beacon.configs``) name their model on the first line,
   ``# config: beacon.eval.config:EvalConfig`` (read by :func:`config_class_for`).
7. A document whose ``&anchor`` / ``*alias`` pairs expand to more than ``MAX_YAML_VALUES``
   values is refused as invalid YAML: 1 KB of nested aliases can stand for 10^9 values, which
   every later step that walks the tree (validation, the error printer) would write out.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import importlib
import json
import re
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

M = TypeVar("M", bound=BaseModel)

_EXP_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
_CLASS_LINE = re.compile(r"^#\s*config:\s*([\w.]+):(\w+)\s*$")
_EXPECTED = {  # pydantic error type -> the type name our messages use
    "int_type": "int",
    "int_from_float": "int",
    "int_parsing": "int",
    "float_type": "float",
    "float_parsing": "float",
    "bool_type": "bool",
    "bool_parsing": "bool",
    "string_type": "str",
    "list_type": "list",
    "tuple_type": "list",
    "dict_type": "mapping",
}


_BOUNDS = {  # pydantic error type -> (comparison, its ctx key), for Field(ge=..., ...) limits
    "greater_than_equal": (">=", "ge"),
    "greater_than": (">", "gt"),
    "less_than_equal": ("<=", "le"),
    "less_than": ("<", "lt"),
}


MAX_YAML_VALUES = 100_000
"""Cap on the values a config document holds once its aliases are expanded (point 7)."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-5`` as a float (YAML 1.2) instead of a string, and refuses
    a document whose aliases expand past ``MAX_YAML_VALUES`` values, or refer to themselves."""

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            _expanded_size(node, {}, set())
        return node


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_: set[int]) -> int:
    """Values in ``node`` with every alias written out, counted over the shared node graph (each
    node once, so a billion-laughs document costs its own size to check, not its expansion)."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:
        raise yaml.composer.ComposerError(
            None, None, "an alias refers to the node that holds it (a recursive config)",
            node.start_mark,
        )  # fmt: skip
    open_.add(key)
    children: list[yaml.Node] = []
    if isinstance(node, yaml.SequenceNode):
        children = node.value
    elif isinstance(node, yaml.MappingNode):
        children = [part for pair in node.value for part in pair]
    size = 1 + sum(_expanded_size(child, sizes, open_) for child in children)
    open_.discard(key)
    if size > MAX_YAML_VALUES:
        raise yaml.composer.ComposerError(
            None, None,
            f"its aliases expand to more than {MAX_YAML_VALUES} values (an alias bomb?); write "
            "the values out instead of repeating them through &anchors and *aliases",
            node.start_mark,
        )  # fmt: skip
    sizes[key] = size
    return size


def load_yaml(text: str) -> Any:
    """YAML text as data, the way config files and ``--set`` values are read (``_Loader``)."""
    return yaml.load(text, Loader=_Loader)


class _Dumper(yaml.SafeDumper):
    """SafeDumper that quotes strings such as ``"1e-5"``, so that _Loader reads them as strings."""


for _cls in (_Loader, _Dumper):
    _cls.add_implicit_resolver("tag:yaml.org,2002:float", _EXP_FLOAT, list("-+0123456789."))


class StrictModel(BaseModel):
    """The base of every settings section and request body: an unknown key is an error that
    names it (a typo never silently takes the default), and an assignment is validated like a
    load, so a config object never holds a value its file could not."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


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


@dataclass(frozen=True)
class Override:
    """One ``--set`` item: the dotted key split into ``keys``, raw ``text``, YAML ``value``."""

    keys: tuple[str, ...]
    text: str
    value: Any


@dataclass(frozen=True)
class Setting:
    """One row of :func:`describe`: a leaf setting of a config model."""

    name: str
    type: str
    default: str
    help: str


def raise_problems(problems: Sequence[str]) -> None:
    """Raise the cross-field problems of a model validator, one per line (see point 5)."""
    if problems:
        raise ValueError("\n".join(problems))


def parse_overrides(overrides: Sequence[str]) -> list[Override]:
    """Parses ``["a.b=1", "modes=[tool,notool]"]``; raises ConfigError listing every bad item."""
    problems: list[str] = []
    parsed = _parse_overrides(overrides, problems)
    if problems:
        raise ConfigError(problems, "--set overrides")
    return parsed


def load_config(cls: type[M], path: str | Path | None = None, overrides: Sequence[str] = ()) -> M:
    """Builds ``cls`` from its defaults, then the YAML file at ``path``, then ``overrides``.

    Raises ConfigError naming every unknown key, wrong type, missing required setting and
    cross-field problem at once.
    """
    if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
        raise TypeError(f"load_config needs a pydantic model class, got {cls!r}")
    source = " + ".join(
        ([str(path)] if path is not None else []) + (["--set"] if overrides else [])
    )
    source = source or f"{cls.__name__} defaults"
    problems: list[str] = []
    tree = _merge(cls, _defaults(cls), _read_yaml(Path(path), cls) if path is not None else {})
    parsed = _parse_overrides(overrides, problems)
    for override in parsed:
        _apply_override(tree, override, problems)
    if problems:
        raise ConfigError(problems, source)
    try:
        return _validate(cls, tree)
    except ValidationError as exc:
        errors = _retry_overrides_as_text(cls, tree, parsed, exc)
        if errors is None:
            return _validate(cls, tree)
        raise ConfigError(_problems(cls, errors), source) from None


def to_dict(config: BaseModel) -> dict[str, Any]:
    """Plain YAML/JSON-ready data: nested models become dicts, tuples lists, paths strings."""
    return config.model_dump(mode="json")


def to_yaml(config: BaseModel) -> str:
    """The resolved config as YAML, in field order; ``load_config`` reads it back unchanged."""
    return yaml.dump(to_dict(config), Dumper=_Dumper, sort_keys=False, allow_unicode=True)


def describe(cls: type[BaseModel], config: BaseModel | None = None) -> list[Setting]:
    """One row per leaf setting, nested models expanded; ``(required)`` marks no default.

    With ``config`` (an instance of ``cls``), ``default`` holds its values instead: the settings
    as a run would use them.
    """
    return _describe(cls, "", config)


def format_describe(cls: type[BaseModel], config: BaseModel | None = None) -> str:
    """``describe(cls, config)`` as an aligned text table: what every ``--show-config`` prints
    (the ``value`` column when ``config`` is given, else ``default``)."""
    rows = [("setting", "type", "default" if config is None else "value", "help")]
    rows += [(s.name, s.type, s.default, s.help) for s in describe(cls, config)]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(row[i].ljust(widths[i]) for i in range(3)) + "  " + row[3] for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def config_class_for(path: str | Path) -> type[BaseModel] | None:
    """The model named by a ``# config: module:Class`` first line, or None without one."""
    with open(path, encoding="utf-8") as file:
        match = _CLASS_LINE.match(file.readline().strip())
    if match is None:
        return None
    cls = getattr(importlib.import_module(match[1]), match[2], None)
    if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
        raise ConfigError(
            [f"first line names {match[1]}:{match[2]}, not a pydantic model"], str(path)
        )
    return cls


# ----------------------------------------------------------------------------------- secrets

_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


def env_var_name(value: str | None) -> str | None:
    """Field validator of a setting that names the environment variable holding a secret
    (``engine.api_key_env``): a key pasted in place of the name is refused, not written to the
    run folder's config.yaml. The message does not repeat the value, which may be the key."""
    if value is not None and not _ENV_NAME.fullmatch(value):
        raise ValueError(
            "expected the name of an environment variable (capitals, digits and _, e.g. "
            "OPENAI_API_KEY), not the key itself; export the key in that variable and name it here"
        )
    return value


def refuse_secret(data: Any, fix: str) -> Any:
    """Body of a ``model_validator(mode="before")`` of a section that reaches a server: a key is
    never a setting, because every setting is written to the run folder's config.yaml. ``fix``
    says where the key goes instead. ``api_key: null`` (config files that predate the rule) is
    dropped; the message does not repeat the value."""
    if not isinstance(data, Mapping) or "api_key" not in data:
        return data
    if data["api_key"] is None:
        return {key: value for key, value in data.items() if key != "api_key"}
    raise ValueError(
        f"api_key is not a setting: settings are written to the run folder's config.yaml, and a "
        f"key must never be; {fix}"
    )


# ------------------------------------------------------------------------------ run identity


def identity(config: BaseModel, operational: Iterable[str]) -> dict[str, Any]:
    """The resolved config as flat ``{"a.b": value}``, minus the ``operational`` keys.

    An operational key (``concurrency``, ``out``) names a setting or a whole section that changes
    how a run goes, not what its results mean; everything else is the run's identity.
    """
    return drop_keys(flatten(to_dict(config)), operational)


def identity_hash(flat: Mapping[str, Any]) -> str:
    """SHA-256 of an :func:`identity`, in canonical JSON (sorted keys), as hex."""
    text = json.dumps(dict(flat), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def identity_diff(before: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """``"key: old -> new"`` for every key whose value differs, or that only one side has."""
    keys = sorted(set(before) | set(now))
    missing = "(unset)"
    return [
        f"{k}: {json.dumps(before.get(k, missing))} -> {json.dumps(now.get(k, missing))}"
        for k in keys
        if before.get(k, missing) != now.get(k, missing)
    ]


NO_DEFAULT = object()
"""What `field_default` returns for a required setting, or a key no model declares."""


def field_default(cls: type[BaseModel], key: str) -> Any:
    """The JSON-ready default of the dotted setting `key` of `cls` (`NO_DEFAULT` if none)."""
    *sections, name = key.split(".")
    model: type[BaseModel] | None = cls
    for section in sections:
        info = model.model_fields.get(section) if model is not None else None
        model = _model_of(info.annotation) if info is not None else None
    info = model.model_fields.get(name) if model is not None else None
    if info is None or info.is_required():
        return NO_DEFAULT
    return _plain(info.get_default(call_default_factory=True))


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; an empty mapping stays a leaf."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def drop_keys(flat: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """``flat`` without each key in ``keys`` and everything under it (``"engine"`` drops
    ``"engine.name"``)."""
    prefixes = tuple(keys)
    return {
        k: v for k, v in flat.items() if not any(k == p or k.startswith(p + ".") for p in prefixes)
    }


# ---------------------------------------------------------------- reading files and overrides


def _read_yaml(path: Path, cls: type) -> dict:
    try:
        raw = load_yaml(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(["file not found"], str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"cannot read the file ({exc})"], str(path)) from None
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
            parsed.append(Override(keys, text.strip(), load_yaml(text)))
        except yaml.YAMLError as exc:
            problems.append(f"--set {item}: value is not valid YAML ({str(exc).splitlines()[0]})")
    return parsed


def _defaults(cls: type[BaseModel]) -> dict[str, Any]:
    """The defaults of ``cls`` as a JSON-ready tree; required fields are left out."""
    tree = {}
    for name, info in cls.model_fields.items():
        if info.is_required():
            continue
        value = info.get_default(call_default_factory=True)
        tree[name] = _plain(value)
    return tree


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json.loads(json.dumps(dataclasses.asdict(value), default=str))
    return json.loads(json.dumps(value, default=str))


def _merge(tp: Any, base: Any, new: Any) -> Any:
    """``new`` laid over ``base``: recursively for model sections, wholesale for anything else."""
    model = _model_of(tp)
    if model is not None and new is None and isinstance(base, Mapping):
        return base  # a section left empty in the file (``engine:``) keeps its defaults
    if model is None or not isinstance(new, Mapping) or not isinstance(base, Mapping):
        return copy.deepcopy(new)
    merged = dict(base)
    for key, value in new.items():
        child = model.model_fields.get(key) if isinstance(key, str) else None
        field_tp = child.annotation if child is not None else None
        merged[key] = _merge(field_tp, base.get(key), value)
    return merged


def _apply_override(tree: dict, override: Override, problems: list[str]) -> None:
    """Puts ``override.value`` at its place in the tree, creating missing sections on the way."""
    node = tree
    for depth, key in enumerate(override.keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            section = ".".join(override.keys[: depth + 1])
            problems.append(
                f"--set {'.'.join(override.keys)}: {section} is {_show(child)}, not a section "
                f"of settings; set it whole, e.g. --set {section}=..."
            )
            return
        node = child
    node[override.keys[-1]] = override.value


def _validate(cls: type[M], tree: dict) -> M:
    return cls.model_validate_json(json.dumps(tree, default=str), strict=True)


def _retry_overrides_as_text(
    cls: type[BaseModel], tree: dict, overrides: Sequence[Override], exc: ValidationError
) -> list[dict] | None:
    """Point 3: put the verbatim text of rejected ``--set`` values in; the errors left, or None."""
    rejected = {
        _dotted(_field_loc(cls, err["loc"])) for err in exc.errors() if err["type"] == "string_type"
    }
    changed = False
    for override in overrides:
        scalar = not isinstance(override.value, (list, dict))
        if ".".join(override.keys) in rejected and scalar and override.value != override.text:
            _apply_override(tree, Override(override.keys, override.text, override.text), [])
            changed = True
    if not changed:
        return exc.errors()
    try:
        _validate(cls, tree)
    except ValidationError as again:
        return again.errors()
    return None


# ------------------------------------------------------------------------------- error text


def _problems(cls: type[BaseModel], errors: list[dict]) -> list[str]:
    """One line per problem; the arms of a union that all failed become one line."""
    by_path: dict[str, list[dict]] = {}
    for err in errors:
        path, tp = _resolve(cls, err["loc"])
        by_path.setdefault(path, []).append({**err, "field_type": tp})
    lines, checks = [], []
    for path, errs in by_path.items():
        if len(errs) > 1 and all(e["type"] in _EXPECTED for e in errs):
            tp = errs[0]["field_type"]
            expected = (
                _type_name(tp) if tp is not None else " | ".join(_EXPECTED[e["type"]] for e in errs)
            )
            lines.append(
                f"{path or 'top level'}: expected {expected}, got {_show(errs[0]['input'])}"
            )
            continue
        for err in errs:
            target = checks if err["type"] == "value_error" else lines
            target.extend(_problem(cls, path, err))
    return lines + checks


def _problem(cls: type[BaseModel], path: str, err: dict) -> list[str]:
    kind, value = err["type"], err.get("input")
    where = path or "top level"
    if kind == "extra_forbidden" or kind == "unexpected_keyword_argument":
        return [_unknown_key(cls, err["loc"])]
    if kind == "missing":
        tp = _type_name(err["field_type"]) if err["field_type"] is not None else "a value"
        return [
            f"{where}: missing required setting ({tp}); set it in the file or with --set {path}=..."
        ]
    if kind == "value_error":
        text = str(err["ctx"]["error"]) if "ctx" in err else err["msg"]
        return [f"{path}: {line}" if path else line for line in text.splitlines()]
    if kind == "literal_error":
        tp = _strip_none(err["field_type"])
        allowed = ", ".join(_show(a) for a in get_args(tp)) if get_origin(tp) is Literal else None
        return [f"{where}: expected one of {allowed or err['ctx']['expected']}, got {_show(value)}"]
    if kind in ("model_type", "model_attributes_type", "dataclass_type", "dataclass_exact_type"):
        name = getattr(err["field_type"], "__name__", "section")
        return [f"{where}: expected a mapping of {name} settings, got {_show(value)}"]
    if kind in _BOUNDS:
        word, key = _BOUNDS[kind]
        return [f"{where}: must be {word} {err['ctx'][key]}, got {_show(value)}"]
    if kind in ("too_long", "too_short"):
        tp = err["field_type"]
        if get_origin(_strip_none(tp)) is tuple:
            return [f"{where}: expected {_type_name(tp)}, got {_show(value)}"]
        bound = (
            f"at least {err['ctx']['min_length']}"
            if kind == "too_short"
            else "at most " + str(err["ctx"]["max_length"])
        )
        return [f"{where}: expected {bound} items, got {_show(value)}"]
    if kind in _EXPECTED:
        tp = err["field_type"]
        expected = _type_name(tp) if tp is not None and not _is_union(tp) else _EXPECTED[kind]
        return [f"{where}: expected {expected}, got {_show(value)}"]
    message = err["msg"][:1].lower() + err["msg"][1:]
    return [f"{where}: {message}, got {_show(value)}"]


def _resolve(cls: type[BaseModel], loc: Sequence[Any]) -> tuple[str, Any]:
    """The dotted path of a pydantic error location and the declared type found there.

    Union arms appear in pydantic locations as tags (``"int"``, ``"str"``); they are skipped.
    """
    path, tp = "", cls
    for part in _field_loc(cls, loc):
        path = f"{path}[{part}]" if isinstance(part, int) else f"{path}.{part}".lstrip(".")
        tp = _child_type(tp, part)
    return path, tp


def _field_loc(cls: type[BaseModel], loc: Sequence[Any]) -> list[Any]:
    """``loc`` without union arm tags."""
    kept, tp = [], cls
    for part in loc:
        if isinstance(part, str) and _is_union(_strip_none(tp)):
            continue
        kept.append(part)
        tp = _child_type(tp, part)
    return kept


def _child_type(tp: Any, part: Any) -> Any:
    """The declared type at key or index ``part`` inside a value of type ``tp`` (None: unknown)."""
    keys = _section_keys(tp)
    if keys is not None and isinstance(part, str):
        return keys.get(part)
    return _item_type(tp)


def _section_keys(tp: Any) -> dict[str, Any] | None:
    """Field name -> type of a model or dataclass type (``X | None`` too), else None."""
    tp = _strip_none(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return {name: info.annotation for name, info in tp.model_fields.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = get_type_hints(tp)
        return {f.name: hints.get(f.name) for f in dataclasses.fields(tp)}
    return None


def _dotted(loc: Sequence[Any]) -> str:
    return ".".join(str(part) for part in loc)


def _unknown_key(cls: type[BaseModel], loc: Sequence[Any]) -> str:
    parent, tp = _resolve(cls, loc[:-1])
    key = str(loc[-1])
    keys = list(_section_keys(tp) or {})
    prefix = f"{parent}." if parent else ""
    close = difflib.get_close_matches(key, keys, n=1)
    if close:
        return f"{prefix}{key}: unknown key; did you mean {prefix}{close[0]}?"
    return f"{prefix}{key}: unknown key; valid keys: {', '.join(keys)}"


# ---------------------------------------------------------------------------------- helpers


def _model_of(tp: Any) -> type[BaseModel] | None:
    """The model class of a field type (``Model`` or ``Model | None``), else None."""
    tp = _strip_none(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _strip_none(tp: Any) -> Any:
    if _is_union(tp):
        arms = [arm for arm in get_args(tp) if arm is not type(None)]
        if len(arms) == 1:
            return arms[0]
    return tp


def _item_type(tp: Any) -> Any:
    """The type of an element of a list, tuple or dict field (None when unknown)."""
    tp = _strip_none(tp)
    args = get_args(tp)
    origin = get_origin(tp)
    if origin in (list, tuple) and args:
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    return None


def _show(value: Any) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if tp is type(None):
        return "null"
    if tp is Any:
        return "any"
    if tp is Path:
        return "path"
    if _is_union(tp):
        return " | ".join(_type_name(arm) for arm in get_args(tp))
    if origin is Literal:
        return " | ".join(_show(allowed) for allowed in get_args(tp))
    if origin in (list, dict, tuple):
        args = ", ".join("..." if arg is ... else _type_name(arg) for arg in get_args(tp))
        return f"{origin.__name__}[{args}]"
    return getattr(tp, "__name__", str(tp))


def _describe(cls: type[BaseModel], prefix: str, base: Any) -> list[Setting]:
    rows = []
    for name, info in cls.model_fields.items():
        tp = info.annotation
        given = isinstance(base, cls)
        if given:
            default: Any = getattr(base, name)
        elif info.is_required():
            default = None
        else:
            default = info.get_default(call_default_factory=True)
        model = _model_of(tp)
        if model is not None and _strip_none(tp) is tp:
            rows += _describe(model, f"{prefix}{name}.", default)
            continue
        shown = "(required)" if info.is_required() and not given else _show(_plain(default))
        rows.append(Setting(prefix + name, _type_name(tp), shown, info.description or ""))
    return rows
