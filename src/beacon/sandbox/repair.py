"""Code repair: fixes mechanical mistakes in model-written code before the sandbox runs it.

Thyme-compatible: models trained on Thyme data write markdown fences, stray indentation, ``cv.``
for ``cv2.``, invented image paths, and save to Thyme's ``/mnt/data/temp_processed_images/``.
Repairing these keeps an episode about visual reasoning rather than about typos. This is a pure
function: no I/O, no execution. It edits the text at ``ast`` node positions, so code that needs
no repair comes back byte for byte with no changes. It runs in time linear in the code's length
(the sandbox also caps that length, ``SandboxConfig.max_code_chars``).

Crop boxes are not repaired here: the sandbox clamps them at run time, in ``Image.crop`` itself
(``beacon.sandbox.crops``), where the box's real value and the real image size are known.

Repairs, in order:

1. Fences: the lines inside markdown fences (```python ... ```) are kept, the prose around them
   is dropped; several blocks are joined.
2. Indentation, only when the code does not parse: leading tabs become 4 spaces and indentation
   common to all lines is removed; then, kept only if the code then parses, the first line is
   aligned with the rest (or the rest with the first line).
3. ``RepairConfig.thyme_save_dir`` becomes ``output_dir``, anywhere in the text.
4. ``cv.`` becomes ``cv2.`` where ``cv`` is never bound by the code (``import cv2 as cv`` stays).
5. A string literal naming an image file (.jpg .jpeg .png .webp .bmp .gif .tif .tiff) read by
   ``Image.open``, ``*.imread`` or ``open(path[, "r"/"rb"])``, directly or through a name bound
   only to it (``p = "a.jpg"; Image.open(p)``), and is neither ``image_path``, nor under
   ``output_dir``, nor saved by the same code, becomes ``image_path``.
What is not covered:

- f-string paths; relative image paths saved by an earlier call are taken for invented ones;
- ``image_path`` rebound by an earlier call (the sandbox carries variables) is still taken for
  the input image;
- code that still does not parse after step 2 gets steps 1-3 only, and a note; the sandbox
  reports its SyntaxError to the model.
"""

from __future__ import annotations

import ast
import posixpath
import re
import textwrap
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

THYME_SAVE_DIR = "/mnt/data/temp_processed_images"
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")

_FENCE = re.compile(r"^[ \t]*```")
_LINE_BREAK = re.compile(r"(?<=\n)|(?<=\r)(?!\n)")  # the line ends ast counts: \n, \r\n, \r
_NAMED_BINDERS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler)
_Edit = tuple[int, int, str]  # (start, end, replacement) offsets into the text
_PARSE_LOCK = threading.Lock()


def _parse(code: str, mode: str = "exec") -> ast.Module | ast.Expression:
    """`ast.parse`, one thread at a time: CPython 3.11 keeps the AST builder's recursion
    counter per interpreter, so parses racing in the agent loop's tool threads can corrupt it
    and raise `SystemError: AST constructor recursion depth mismatch` (cpython gh-106905)."""
    with _PARSE_LOCK:
        return ast.parse(code, mode=mode)


@dataclass(frozen=True)
class RepairConfig:
    min_crop_size: int = 4  # smallest side of a box clamped at run time (see crops.clamp_box)
    thyme_save_dir: str = THYME_SAVE_DIR  # folder Thyme models save to; rewritten to output_dir
    fix_indentation: bool = True  # tabs, common indentation, a misaligned first line
    fix_cv_alias: bool = True  # cv. -> cv2.
    fix_image_paths: bool = True  # invented image paths -> image_path
    clamp_crops: bool = True  # Image.crop boxes ordered and clamped into the image at run time


@dataclass
class RepairResult:
    code: str  # the code to run
    changes: list[str] = field(default_factory=list)  # what was changed, for logs
    syntax_error: str | None = None  # set when the repaired code still does not parse


def repair_code(
    code: str,
    *,
    image_path: str,
    output_dir: str,
    config: RepairConfig | None = None,
    other_image_paths: Sequence[str] = (),
) -> RepairResult:
    """Repairs model code for an episode whose input image is ``image_path`` and whose outputs
    go to ``output_dir``. See the module docstring.

    ``other_image_paths``: further real inputs of a multi-image episode; reads of them are kept.
    """
    config = config or RepairConfig()
    changes: list[str] = []
    code = _strip_fences(code, changes)
    if config.fix_indentation and not _parses(code):
        code = _fix_indentation(code, changes)
    code = _rewrite_save_dir(code, config.thyme_save_dir, output_dir, changes)
    try:
        tree = _parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        error = _syntax_error_text(exc)
        changes.append(f"code does not parse ({error}); crop, path and cv2 repairs skipped")
        return RepairResult(code, changes, error)
    parsed = _ParsedCode(tree, code, (image_path, *other_image_paths), output_dir)
    edits: list[_Edit] = []
    if config.fix_cv_alias:
        edits += _cv_edits(parsed, changes)
    if config.fix_image_paths:
        edits += _path_edits(parsed, changes)
    return RepairResult(_apply_edits(code, edits), changes)


# ------------------------------------------------------------------------- text-level repairs


def _strip_fences(code: str, changes: list[str]) -> str:
    """The lines inside markdown fences; a lone fence is an opening one only at the top."""
    lines = code.splitlines(keepends=True)
    fences = [i for i, line in enumerate(lines) if _FENCE.match(line)]
    if not fences:
        return code
    first_code = next(i for i, line in enumerate(lines) if line.strip())
    if len(fences) == 1:
        kept = lines[fences[0] + 1 :] if fences[0] == first_code else lines[: fences[0]]
    else:
        inside = [False] * len(lines)
        for start, end in zip(fences[::2], [*fences[1::2], len(lines)], strict=False):
            inside[start + 1 : end] = [True] * (end - start - 1)
        kept = [line for line, keep in zip(lines, inside, strict=True) if keep]
    changes.append(f"removed markdown fences ({lines[fences[0]].strip()})")
    return "".join(kept)


def _fix_indentation(code: str, changes: list[str]) -> str:
    """For code that does not parse: safe fixes first (they never change what valid code
    means), then one guess if it parses."""
    safe: list[tuple[str, Callable[[str], str]]] = [
        ("expanded tabs in indentation to 4 spaces", _expand_tabs),
        ("removed the indentation common to all lines", textwrap.dedent),
    ]
    for note, fix in safe:
        fixed = fix(code)
        if fixed != code:
            code = fixed
            changes.append(note)
    if _parses(code):
        return code
    guess = _align_first_line(code)
    if guess != code and _parses(guess):
        changes.append("aligned the indentation of the first line with the lines after it")
        return guess
    return code


def _expand_tabs(code: str) -> str:
    return re.sub(r"^[ \t]+", lambda m: m.group().expandtabs(4), code, flags=re.MULTILINE)


def _align_first_line(code: str) -> str:
    """Indents the first code line like the least-indented later line (or the reverse)."""
    lines = code.splitlines(keepends=True)
    filled = [i for i, line in enumerate(lines) if line.strip()]
    if len(filled) < 2:
        return code
    first = filled[0]
    first_indent = _indent(lines[first])
    rest_indent = min(_indent(lines[i]) for i in filled[1:])
    if first_indent > rest_indent:
        lines[first] = " " * rest_indent + lines[first].lstrip(" ")
    else:
        for i in filled[1:]:
            lines[i] = lines[i][rest_indent - first_indent :]
    return "".join(lines)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _rewrite_save_dir(code: str, save_dir: str, output_dir: str, changes: list[str]) -> str:
    save_dir, output_dir = save_dir.rstrip("/"), output_dir.rstrip("/")
    pattern = re.escape(save_dir) + r"(?![\w.-])"
    code, count = re.subn(pattern, lambda _: output_dir, code)
    if count:
        changes.append(f"save folder {save_dir} -> {output_dir} ({count}x)")
    return code


def _parses(code: str) -> bool:
    try:
        _parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _syntax_error_text(exc: Exception) -> str:
    if isinstance(exc, (RecursionError, MemoryError)):
        return f"{type(exc).__name__}: code nested too deeply to parse"
    if isinstance(exc, SyntaxError) and exc.lineno is not None:
        return f"{type(exc).__name__}: {exc.msg} (line {exc.lineno})"
    return f"{type(exc).__name__}: {getattr(exc, 'msg', None) or exc}"


def _apply_edits(code: str, edits: list[_Edit]) -> str:
    """Applies non-overlapping edits; an insertion at a point sorts before a replacement there."""
    parts, position = [], 0
    for start, end, text in sorted(edits, key=lambda edit: (edit[0], edit[1])):
        assert start >= position, f"overlapping repair edits at offset {start}"
        parts += [code[position:start], text]
        position = end
    return "".join([*parts, code[position:]])


# -------------------------------------------------------------------------- ast-level repairs


class _ParsedCode:
    """The parsed code with what the ast repairs share: offsets, bindings, saved paths."""

    def __init__(
        self,
        tree: ast.Module,
        code: str,
        image_paths: Sequence[str],
        output_dir: str,
    ):
        self.tree, self.code = tree, code
        self.image_path = image_paths[0]
        self.real_paths = {posixpath.normpath(path) for path in image_paths}
        self.output_dir = posixpath.normpath(output_dir)
        lines = _LINE_BREAK.split(code)
        self.lines = lines
        self._line_bytes: dict[int, bytes] = {}
        self.line_starts = [0]
        for line in lines[:-1]:
            self.line_starts.append(self.line_starts[-1] + len(line))
        self.nodes = list(ast.walk(tree))
        self.bindings = _bindings(self.nodes)
        self.path_names = _path_names(self.nodes, self.bindings)
        self.saved_paths = {
            path.value for node in self.nodes for path in self.path_args(node, _writes_path)
        }

    def path_args(self, node: ast.AST, kind: Callable[[ast.Call], bool]) -> list[ast.Constant]:
        """The string literals that a call of ``kind`` gets as its first argument: written there,
        or bound to the name written there (``p = "a.jpg"; Image.open(p)``)."""
        if not (isinstance(node, ast.Call) and node.args and kind(node)):
            return []
        first = node.args[0]
        if _is_string(first):
            return [first]
        return self.path_names.get(first.id, []) if isinstance(first, ast.Name) else []

    def span(self, node: ast.AST) -> tuple[int, int] | None:
        """Text offsets of an expression node, or None when the text there does not parse back
        to the same node (ast positions inside f-strings are unreliable before Python 3.12)."""
        start = self._offset(node.lineno, node.col_offset)
        end = self._offset(node.end_lineno, node.end_col_offset)
        try:
            same = ast.dump(_parse(self.code[start:end], mode="eval").body) == ast.dump(node)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            same = False
        return (start, end) if same else None

    def _offset(self, lineno: int, col: int) -> int:
        """Text offset of ast's (line, UTF-8 byte column); O(1) on ASCII lines, so that the
        repair stays linear in the code's length even when it is one long line."""
        line = self.lines[lineno - 1]
        if not line.isascii():
            if lineno not in self._line_bytes:
                self._line_bytes[lineno] = line.encode()
            col = len(self._line_bytes[lineno][:col].decode(errors="ignore"))
        return self.line_starts[lineno - 1] + col

    def is_invented_path(self, path: str) -> bool:
        """An image path the code reads that cannot be a real file of this parsed."""
        if not path.lower().endswith(IMAGE_EXTENSIONS) or path in self.saved_paths:
            return False
        normal = posixpath.normpath(path)
        under_output = normal.startswith(self.output_dir + "/")
        return normal not in self.real_paths and not under_output


def _cv_edits(parsed: _ParsedCode, changes: list[str]) -> list[_Edit]:
    if parsed.bindings["cv"]:
        return []
    edits, lines = [], []
    for node in parsed.nodes:
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            continue
        span = parsed.span(node.value) if node.value.id == "cv" else None
        if span is not None:
            edits.append((*span, "cv2"))
            lines.append(node.lineno)
    if lines:
        changes.append(f"cv. -> cv2. (line {', '.join(map(str, sorted(set(lines))))})")
    return edits


def _path_edits(parsed: _ParsedCode, changes: list[str]) -> list[_Edit]:
    read = {id(p): p for node in parsed.nodes for p in parsed.path_args(node, _reads_image)}
    edits = []
    for path in sorted(read.values(), key=lambda p: (p.lineno, p.col_offset)):
        span = parsed.span(path) if parsed.is_invented_path(path.value) else None
        if span is not None:
            edits.append((*span, repr(parsed.image_path)))
            changes.append(
                f"line {path.lineno}: image path {path.value!r} -> {parsed.image_path!r}"
            )
    return edits


def _reads_image(call: ast.Call) -> bool:
    """Image.open(p), *.imread(p), open(p) or open(p, "rb")."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr == "imread" or (func.attr == "open" and _is_pil_image_module(func.value))
    return isinstance(func, ast.Name) and func.id == "open" and _opens_for_reading(call)


def _writes_path(call: ast.Call) -> bool:
    """X.save(p), *.imwrite(p), *.savefig(p), open(p, "w...")."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr in ("save", "imwrite", "savefig")
    return isinstance(func, ast.Name) and func.id == "open" and not _opens_for_reading(call)


def _opens_for_reading(call: ast.Call) -> bool:
    mode = call.args[1] if len(call.args) > 1 else None
    mode = next((kw.value for kw in call.keywords if kw.arg == "mode"), mode)
    if mode is None:
        return True
    return isinstance(mode, ast.Constant) and not set(str(mode.value)) & set("wax+")


def _is_pil_image_module(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "Image") or (
        isinstance(node, ast.Attribute) and node.attr == "Image"
    )


def _bindings(nodes: list[ast.AST]) -> Counter[str]:
    """How often each name is bound anywhere in the code (assignments, imports, defs, args)."""
    bound: Counter[str] = Counter()
    for node in nodes:
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound[node.id] += 1
        elif isinstance(node, ast.arg):
            bound[node.arg] += 1
        elif isinstance(node, ast.alias):
            bound[node.asname or node.name.split(".")[0]] += 1
        elif isinstance(node, _NAMED_BINDERS) and node.name:
            bound[node.name] += 1
    return bound


def _path_names(nodes: list[ast.AST], bindings: Counter[str]) -> dict[str, list[ast.Constant]]:
    """Names bound only by ``name = "string literal"``, with those literals."""
    literals: dict[str, list[ast.Constant]] = {}
    for node in nodes:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if isinstance(target, ast.Name) and _is_string(value):
            literals.setdefault(target.id, []).append(value)
    return {name: found for name, found in literals.items() if len(found) == bindings[name]}


def _is_string(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)
