"""Code repair: fixes mechanical mistakes in model-written code before the sandbox runs it.

Thyme-compatible: models trained on Thyme data write markdown fences, stray indentation, ``cv.``
for ``cv2.``, crop boxes outside the image, invented image paths, and save to Thyme's
``/mnt/data/temp_processed_images/``. Repairing these keeps an episode about visual reasoning
rather than about typos. This is a pure function: no I/O, no execution. It edits the text at
``ast`` node positions, so code that needs no repair comes back byte for byte with no changes.

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
6. ``X.crop(box)``: if this code bound ``X`` only to ``Image.open(<input image>)`` (or ``X`` is that
   call) and ``box`` is four number literals, an invalid box is rewritten in place to
   ``clamp_box(box, image_size, min_crop_size)``. Any other crop on a plain name or attribute gets
   its box checked at run time, ``X.crop(_beacon_clamp_box(box, X.size, 4))``, except a literal
   box valid for the input image on the sandbox's preset ``image``. The sandbox must therefore
   put :func:`clamp_box` into the namespace under :data:`CLAMP_HELPER_NAME`.

What is not covered:

- numpy slicing (``arr[y0:y1, x0:x1]``), where negative indices wrap around silently;
- crops on call results with a non-literal box (``Image.open(p).crop(box)``);
- f-string paths; relative image paths saved by an earlier call are taken for invented ones;
- ``image_path`` rebound by an earlier call (the sandbox carries variables) is still taken for
  the input image;
- code that still does not parse after step 2 gets steps 1-3 only, and a note; the sandbox
  reports its SyntaxError to the model.
"""

from __future__ import annotations

import ast
import math
import numbers
import posixpath
import re
import textwrap
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

CLAMP_HELPER_NAME = "_beacon_clamp_box"  # one leading underscore: "__x" is mangled in classes
THYME_SAVE_DIR = "/mnt/data/temp_processed_images"
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")

_FENCE = re.compile(r"^[ \t]*```")
_LINE_BREAK = re.compile(r"(?<=\n)|(?<=\r)(?!\n)")  # the line ends ast counts: \n, \r\n, \r
_NAMED_BINDERS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler)
_Edit = tuple[int, int, str]  # (start, end, replacement) offsets into the text


@dataclass(frozen=True)
class RepairConfig:
    min_crop_size: int = 4  # smallest crop side in pixels; smaller boxes grow around their centre
    thyme_save_dir: str = THYME_SAVE_DIR  # folder Thyme models save to; rewritten to output_dir
    fix_indentation: bool = True  # tabs, common indentation, a misaligned first line
    fix_cv_alias: bool = True  # cv. -> cv2.
    fix_image_paths: bool = True  # invented image paths -> image_path
    clamp_crops: bool = True  # crop boxes ordered and clamped into the image


@dataclass
class RepairResult:
    code: str  # the code to run
    changes: list[str] = field(default_factory=list)  # what was changed, for logs
    syntax_error: str | None = None  # set when the repaired code still does not parse


def repair_code(
    code: str,
    *,
    image_size: tuple[int, int],
    image_path: str,
    output_dir: str,
    config: RepairConfig | None = None,
    other_image_paths: Sequence[str] = (),
) -> RepairResult:
    """Repairs model code for an episode whose input image is ``image_path`` of ``image_size``
    (width, height) and whose outputs go to ``output_dir``. See the module docstring.

    ``other_image_paths``: further real inputs of a multi-image episode; reads of them are kept.
    """
    config = config or RepairConfig()
    changes: list[str] = []
    code = _strip_fences(code, changes)
    if config.fix_indentation:
        code = _fix_indentation(code, changes)
    code = _rewrite_save_dir(code, config.thyme_save_dir, output_dir, changes)
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        error = _syntax_error_text(exc)
        changes.append(f"code does not parse ({error}); crop, path and cv2 repairs skipped")
        return RepairResult(code, changes, error)
    inputs = (image_path, *other_image_paths)
    episode = _Episode(tree, code, image_size, inputs, output_dir, config)
    edits: list[_Edit] = []
    if config.fix_cv_alias:
        edits += _cv_edits(episode, changes)
    if config.fix_image_paths:
        edits += _path_edits(episode, changes)
    if config.clamp_crops:
        edits += _crop_edits(episode, changes)
    return RepairResult(_apply_edits(code, edits), changes)


def clamp_box(box: Any, size: Any, min_size: int = 4) -> Any:
    """A crop box (x0, y0, x1, y1) ordered, clamped into an image of ``size`` (w, h), and at
    least ``min_size`` pixels per side (or the whole side when the image is smaller).

    A valid box is returned as given (floats kept); a repaired one as a tuple of ints, its edges
    rounded outwards. A box lying outside the image becomes the ``min_size`` strip at the nearest
    edge. Anything but four finite numbers and a positive (w, h) pair comes back unchanged, so
    that PIL reports its own error. The sandbox injects this as :data:`CLAMP_HELPER_NAME`.
    """
    if not (_finite_numbers(box, 4) and _finite_numbers(size, 2)) or min(size) < 1:
        return box
    if _box_is_valid(box, size, min_size):
        return box
    x0, x1 = _clamp_span(box[0], box[2], int(size[0]), min_size)
    y0, y1 = _clamp_span(box[1], box[3], int(size[1]), min_size)
    return (x0, y0, x1, y1)


def _clamp_span(a: float, b: float, limit: int, min_size: int) -> tuple[int, int]:
    """One side of a box: ordered, inside [0, limit], grown around its centre to min_size."""
    lo = min(max(math.floor(min(a, b)), 0), limit)
    hi = min(max(math.ceil(max(a, b)), 0), limit)
    need = min(min_size, limit)
    if hi - lo < need:
        lo = min(max((lo + hi - need) // 2, 0), limit - need)
        hi = lo + need
    return lo, hi


def _box_is_valid(box: Any, size: Any, min_size: int) -> bool:
    x0, y0, x1, y1 = box
    width, height = size
    fits_x = x0 >= 0 and x0 + min(min_size, width) <= x1 <= width
    return fits_x and y0 >= 0 and y0 + min(min_size, height) <= y1 <= height


def _finite_numbers(values: Any, count: int) -> bool:
    try:
        return len(values) == count and all(
            isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
            for v in values
        )
    except TypeError:
        return False


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
    """Safe fixes first (they never change what valid code means), then one guess if it parses."""
    if _parses(code):
        return code
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
        ast.parse(code)
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


class _Episode:
    """The parsed code with what the ast repairs share: offsets, bindings, saved paths."""

    def __init__(
        self,
        tree: ast.Module,
        code: str,
        image_size: tuple[int, int],
        image_paths: Sequence[str],
        output_dir: str,
        config: RepairConfig,
    ):
        self.tree, self.code, self.config = tree, code, config
        self.image_size, self.image_path = image_size, image_paths[0]
        self.real_paths = {posixpath.normpath(path) for path in image_paths}
        self.output_dir = posixpath.normpath(output_dir)
        lines = _LINE_BREAK.split(code)
        self.lines = lines
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
            same = ast.dump(ast.parse(self.code[start:end], mode="eval").body) == ast.dump(node)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            same = False
        return (start, end) if same else None

    def source(self, node: ast.AST) -> str:
        start = self._offset(node.lineno, node.col_offset)
        return self.code[start : self._offset(node.end_lineno, node.end_col_offset)]

    def _offset(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1]
        return self.line_starts[lineno - 1] + len(line.encode()[:col].decode(errors="ignore"))

    def is_invented_path(self, path: str) -> bool:
        """An image path the code reads that cannot be a real file of this episode."""
        if not path.lower().endswith(IMAGE_EXTENSIONS) or path in self.saved_paths:
            return False
        normal = posixpath.normpath(path)
        under_output = normal.startswith(self.output_dir + "/")
        return normal not in self.real_paths and not under_output

    def is_input_path(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name) and node.id in self.path_names:
            return all(self.is_input_path(path) for path in self.path_names[node.id])
        if isinstance(node, ast.Name):
            return node.id == "image_path" and self.bindings["image_path"] == 0
        if not _is_string(node):
            return False
        invented = self.config.fix_image_paths and self.is_invented_path(node.value)
        return invented or posixpath.normpath(node.value) == posixpath.normpath(self.image_path)


def _cv_edits(episode: _Episode, changes: list[str]) -> list[_Edit]:
    if episode.bindings["cv"]:
        return []
    edits, lines = [], []
    for node in episode.nodes:
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            continue
        span = episode.span(node.value) if node.value.id == "cv" else None
        if span is not None:
            edits.append((*span, "cv2"))
            lines.append(node.lineno)
    if lines:
        changes.append(f"cv. -> cv2. (line {', '.join(map(str, sorted(set(lines))))})")
    return edits


def _path_edits(episode: _Episode, changes: list[str]) -> list[_Edit]:
    read = {id(p): p for node in episode.nodes for p in episode.path_args(node, _reads_image)}
    edits = []
    for path in sorted(read.values(), key=lambda p: (p.lineno, p.col_offset)):
        span = episode.span(path) if episode.is_invented_path(path.value) else None
        if span is not None:
            edits.append((*span, repr(episode.image_path)))
            changes.append(
                f"line {path.lineno}: image path {path.value!r} -> {episode.image_path!r}"
            )
    return edits


def _crop_edits(episode: _Episode, changes: list[str]) -> list[_Edit]:
    """Literal boxes on the input image are fixed in place; other boxes are checked at run time.

    The sandbox's preset ``image`` is the input image unless an earlier call rebound it (the
    sandbox carries variables between calls), which this code cannot see: a literal box valid
    for the input image is left alone there, any other is checked at run time.
    """
    originals = _input_image_names(episode)
    min_size = episode.config.min_crop_size
    edits = []
    for node in episode.nodes:
        box = _crop_box_arg(node)
        span = episode.span(box) if box is not None else None
        if span is None:
            continue
        receiver = node.func.value
        literal = _literal_box(box)
        preset = isinstance(receiver, ast.Name) and receiver.id == "image"
        preset = preset and episode.bindings["image"] == 0
        if literal is not None and _is_input_image(receiver, originals, episode):
            edits += _clamp_literal_box(box, literal, span, episode, changes)
        elif (
            literal is not None and preset and _box_is_valid(literal, episode.image_size, min_size)
        ):
            continue
        elif _is_plain_reference(receiver) and episode.span(receiver) is not None:
            target = episode.source(receiver)
            edits += [
                (span[0], span[0], f"{CLAMP_HELPER_NAME}("),
                (span[1], span[1], f", {target}.size, {min_size})"),
            ]
            changes.append(
                f"line {node.lineno}: box of {target}.crop checked at run time "
                f"by {CLAMP_HELPER_NAME}"
            )
    return edits


def _clamp_literal_box(
    box: ast.expr, literal: tuple, span: tuple[int, int], episode: _Episode, changes: list[str]
) -> list[_Edit]:
    width, height = episode.image_size
    fixed = clamp_box(literal, (width, height), episode.config.min_crop_size)
    if fixed is literal:
        return []
    numbers_text = ", ".join(map(str, fixed))
    text = f"({numbers_text})" if isinstance(box, ast.Tuple) else f"[{numbers_text}]"
    changes.append(
        f"line {box.lineno}: crop box {literal} -> {fixed} for the {width}x{height} image"
    )
    return [(*span, text)]


def _crop_box_arg(node: ast.AST) -> ast.expr | None:
    """The box of ``X.crop(box)`` or ``X.crop(box=box)``, else None."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    if node.func.attr != "crop":
        return None
    if len(node.args) == 1 and not node.keywords and not isinstance(node.args[0], ast.Starred):
        return node.args[0]
    if not node.args and len(node.keywords) == 1 and node.keywords[0].arg == "box":
        return node.keywords[0].value
    return None


def _literal_box(node: ast.AST) -> tuple[float, ...] | None:
    if not (isinstance(node, (ast.Tuple, ast.List)) and len(node.elts) == 4):
        return None
    values = [_number_literal(elt) for elt in node.elts]
    return None if None in values else tuple(values)


def _number_literal(node: ast.AST) -> float | None:
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign = -1 if isinstance(node.op, ast.USub) else 1
        node = node.operand
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return sign * node.value
    return None


def _is_plain_reference(node: ast.AST) -> bool:
    """A name or attribute chain (``img``, ``self.img``): safe to evaluate twice."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _input_image_names(episode: _Episode) -> set[str]:
    """Names that can only hold the input image: each binding here is ``Image.open(<input>)``."""
    opened: Counter[str] = Counter()
    for node in episode.nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.withitem):
            target, value = node.optional_vars, node.context_expr
        else:
            continue
        if isinstance(target, ast.Name) and _opens_input_image(value, episode):
            opened[target.id] += 1
    return {name for name, count in opened.items() if count == episode.bindings[name]}


def _is_input_image(node: ast.AST, originals: set[str], episode: _Episode) -> bool:
    return (isinstance(node, ast.Name) and node.id in originals) or _opens_input_image(
        node, episode
    )


def _opens_input_image(node: ast.AST, episode: _Episode) -> bool:
    """``Image.open(<input image>)``, maybe followed by ``.convert(...)``/``.copy()``."""
    while (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("convert", "copy")
    ):
        node = node.func.value
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "open"
        and _is_pil_image_module(node.func.value)
        and bool(node.args)
        and episode.is_input_path(node.args[0])
    )


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
