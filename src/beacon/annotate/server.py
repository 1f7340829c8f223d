"""The annotation page's server: rows and images out, labels in, JSONL import and export.

A FastAPI app over one annotation JSONL (docs/annotate.md). The page is plain HTML/CSS/JS from
`static/`; there is no build step. Labels go to a `LabelLog` as they are made.

What it trusts (DESIGN.md "Servers and trust"): nobody but the page it served.
- It binds to 127.0.0.1 unless told otherwise, and answers only requests whose `Host` is its
  bound address, a localhost alias of it, or a name passed with `--allowed-host`: a web page
  that rebinds its own name to 127.0.0.1 (DNS rebinding) gets 400, not the rows.
- Every page load gets a fresh random token in the HTML; a write (`POST /api/labels`,
  `/api/import`) must carry it in `X-Beacon-Token` and be `application/json`, else 403 / 415.
  A cross-site form or `fetch` can neither read the token nor send JSON without a preflight
  this server never approves, so it cannot overwrite an annotator's labels.
- Images are served only by index into the table built at start-up (the rows' original images
  and the trajectories' ImageStore keys), and only files under the annotation file's folder or
  `--image-root` that are regular files; no request can name a path.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import secrets
import socket
import threading
import urllib.parse
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import Field

from beacon.annotate.labels import LabelLog
from beacon.annotate.records import (
    LABELS,
    AnnotationFileError,
    AnnotationRow,
    HumanLabel,
    Label,
    parse_rows,
)
from beacon.config import StrictModel
from beacon.files import FileRefused, path_under
from beacon.images import ImageStore

logger = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
DEFAULT_HOST = "127.0.0.1"
TOKEN_HEADER = "X-Beacon-Token"
_TOKEN_SLOT = "__BEACON_TOKEN__"  # in index.html's <meta name="beacon-token">
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
_WILDCARD = frozenset({"", "0.0.0.0", "::"})
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_-]+")


class LabelIn(StrictModel):
    """A label as the page posts it."""

    id: str = Field(description="Rollout id.")
    stage: Label | None = Field(description="Stage or SKIP; None saves a note alone.")
    note: str = Field("", description="Free-text note.")
    annotator: str = Field("", description="Who labels; empty means the server's default.")


class ImportIn(StrictModel):
    """An exported JSONL of this file, as the page posts it."""

    text: str = Field(description="The JSONL text.")
    annotator: str = Field("", description="Whose labels unnamed ones become; empty: default.")


@dataclass
class ImageTable:
    """Paths the server may serve, by index; `add` returns the index a page URL uses.

    Only regular files under one of `roots` are served (`beacon.files.path_under`); any other
    path a row names shows as missing.
    """

    roots: list[Path]
    paths: list[Path] = field(default_factory=list)
    _index: dict[Path, int] = field(default_factory=dict)

    def add(self, path: Path) -> dict[str, Any]:
        """Register `path` and return what the page shows for it: its URL by index (never the path),
        name, and whether it can be served."""
        path = path.resolve()
        if path not in self._index:
            self._index[path] = len(self.paths)
            self.paths.append(path)
        url = f"api/images/{self._index[path]}"
        return {"url": url, "name": path.name, "ok": self.servable(path)}

    def servable(self, path: Path) -> bool:
        """True when `path` is a regular file under one of the allowed roots; anything else shows as
        missing instead of being read."""
        for root in self.roots:
            try:
                return path_under(path, root).is_file()
            except FileRefused:
                continue
        return False


class PageTokens:
    """The write tokens handed out with page loads, the newest `keep` of them (one per tab)."""

    def __init__(self, keep: int = 1024) -> None:
        self._tokens: OrderedDict[str, None] = OrderedDict()
        self._keep = keep
        self._lock = threading.Lock()

    def issue(self) -> str:
        """A new write token for a page load; the oldest is dropped past `keep`, so tokens cannot
        pile up."""
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._tokens[token] = None
            while len(self._tokens) > self._keep:
                self._tokens.popitem(last=False)
        return token

    def valid(self, token: str | None) -> bool:
        """True for a token this server issued and still keeps: writes from pages it did not serve
        are refused."""
        with self._lock:
            return token is not None and token in self._tokens


@dataclass
class Session:
    """One annotation file, its label log and the default annotator."""

    file: Path
    rows: list[AnnotationRow]
    log: LabelLog
    annotator: str
    image_root: Path | None = None
    images: ImageTable = field(init=False)
    views: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        roots = [self.file.parent, *([self.image_root] if self.image_root else [])]
        self.images = ImageTable(roots)
        self.by_id = {row.id: row for row in self.rows}
        self.views = [self._view(row) for row in self.rows]

    def _view(self, row: AnnotationRow) -> dict[str, Any]:
        """What the page shows of a row: text fields, image URLs, segments, critic label."""
        base = self.file.parent
        root = self.image_root or base / (row.image_root or "images")
        trajectory = row.parsed_trajectory()
        segments = [
            {
                "role": s.role,
                "kind": s.kind,
                "text": s.text,
                "images": [self.images.add(p) for p in _store_paths(root, s.images)],
            }
            for s in trajectory.segments
        ]
        return {
            "id": row.id,
            "group_id": row.group_id,
            "group_type": row.group_type,
            "rollout_id": row.rollout_id,
            "question": row.question,
            "reference": row.reference,
            "images": [self.images.add(base / p) for p in row.images],
            "segments": segments,
            "final_answer": row.final_answer,
            "correct": row.correct,
            "finish_reason": trajectory.finish_reason,
            "tool_calls": trajectory.num_tool_calls,
            "critic": row.critic.model_dump() if row.critic else None,
        }

    def labels(self, annotator: str) -> dict[str, dict[str, Any]]:
        """Current labels of `annotator`: labels carried in the file, then the log's last writes.

        A file label counts for the annotator it names (an unnamed one for everybody).
        """
        current = {
            row.id: {"id": row.id, **row.label.model_dump()}
            for row in self.rows
            if row.label and row.label.annotator in ("", annotator)
        }
        current.update(self.log.latest(annotator))
        return current

    def export(self, annotator: str) -> str:
        """The input rows, each with `label` set to this annotator's current label."""
        current = self.labels(annotator)
        lines = []
        for row in self.rows:
            data = row.model_dump(mode="json", exclude_unset=True)
            if row.id in current:
                entry = current[row.id]
                data["label"] = {
                    "stage": entry["stage"],
                    "note": entry.get("note", ""),
                    "annotator": entry.get("annotator") or annotator,
                }
            lines.append(_json_line(data))
        return "".join(lines)

    def import_text(self, text: str, annotator: str) -> int:
        """Append the labels of an exported JSONL of this file; return how many were taken."""
        rows = parse_rows(text, "the imported file")
        foreign = [row.id for row in rows if row.id not in self.by_id]
        if foreign:
            raise AnnotationFileError(
                f"the imported file has {len(foreign)} of {len(rows)} rows whose ids are not in "
                f"{self.file.name} (first: {foreign[0]!r}); import an export of this same file."
            )
        taken = 0
        for row in rows:
            if row.label is not None:
                label = row.label.model_copy(update={"annotator": row.label.annotator or annotator})
                self.log.append(row.id, label)
                taken += 1
        return taken


def _store_paths(root: Path, keys: list[str]) -> list[Path]:
    """Files of ImageStore keys; a missing root is not created (its images show as missing)."""
    if not root.is_dir():
        return [root / key for key in keys]
    store = ImageStore(root)
    return [store.path(key) for key in keys]


def _json_line(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False) + "\n"


def allowed_hosts(bound: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The `Host` names the page answers to: the bound address, its localhost aliases (all of
    them for a loopback or wildcard address, and this machine's names for a wildcard), and
    `extra` (`--allowed-host`)."""
    bound = bound.strip("[]").lower()
    names = {bound}
    if bound in _LOOPBACK or bound in _WILDCARD or _is_loopback(bound):
        names |= _LOOPBACK
    if bound in _WILDCARD:
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    return frozenset(names | {name.strip("[]").lower() for name in extra}) - _WILDCARD


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_name(header: str) -> str | None:
    """The name in a `Host` header ("[::1]:8765" -> "::1"), lowercased; None if malformed."""
    try:
        return urllib.parse.urlsplit(f"//{header}").hostname
    except ValueError:
        return None


def download_name(stem: str, annotator: str) -> str:
    """`STEM.ANNOTATOR.labelled.jsonl` with each part cut to letters, digits, `_` and `-` (at
    most 64): the annotator name is typed into the page, and the name goes into a header."""
    parts = [_UNSAFE_NAME.sub("_", part).strip("_")[:64] or "_" for part in (stem, annotator)]
    return ".".join([*parts, "labelled", "jsonl"])


def create_app(session: Session, hosts: Iterable[str] | None = None) -> FastAPI:
    """The FastAPI app of one annotation session, answering the `Host` names in `hosts` only
    (default: `allowed_hosts("127.0.0.1")`)."""
    app = FastAPI(title="Beacon annotation", docs_url=None, redoc_url=None)
    hosts = allowed_hosts(DEFAULT_HOST) if hosts is None else frozenset(hosts)
    tokens = PageTokens()
    page = (STATIC / "index.html").read_text(encoding="utf-8")

    @app.middleware("http")
    async def check_host(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        header = request.headers.get("host", "")
        if _host_name(header) not in hosts:
            return PlainTextResponse(
                f"Host {header!r} is not an address of this page ({', '.join(sorted(hosts))}); "
                "open it by one of those, or start `beacon annotate` with --allowed-host NAME "
                "for the name you use.",
                status_code=400,
            )
        return await call_next(request)

    def writer(request: Request) -> None:
        """A write comes from a page this server served: JSON, with that page's token."""
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json":
            raise HTTPException(415, "writes are JSON only: send Content-Type: application/json")
        if not tokens.valid(request.headers.get(TOKEN_HEADER)):
            raise HTTPException(
                403,
                f"no valid {TOKEN_HEADER}: writes come only from the page this server served; "
                "reload the page (a restarted server issues new tokens)",
            )

    @app.get("/", include_in_schema=False)
    def index() -> HTMLResponse:
        html = page.replace(_TOKEN_SLOT, tokens.issue())
        return HTMLResponse(html, headers={"Cache-Control": "no-store"})

    @app.get("/api/rows")
    def rows() -> dict[str, Any]:
        return {
            "file": session.file.name,
            "annotator": session.annotator,
            "labels": list(LABELS),
            "rows": session.views,
        }

    @app.get("/api/labels")
    def labels(annotator: str = "") -> dict[str, Any]:
        return {"labels": session.labels(annotator or session.annotator)}

    @app.post("/api/labels", dependencies=[Depends(writer)])
    def save_label(label: LabelIn) -> dict[str, Any]:
        if label.id not in session.by_id:
            raise HTTPException(404, f"no rollout with id {label.id!r} in {session.file.name}")
        who = label.annotator.strip() or session.annotator
        entry = session.log.append(
            label.id, HumanLabel(stage=label.stage, note=label.note, annotator=who)
        )
        return {"saved": entry}

    @app.get("/api/images/{index}", include_in_schema=False)
    def image(index: int) -> FileResponse:
        images = session.images
        if not 0 <= index < len(images.paths) or not images.servable(images.paths[index]):
            raise HTTPException(404, "image not found")
        return FileResponse(images.paths[index])

    @app.get("/api/export")
    def export(annotator: str = "") -> Response:
        who = annotator or session.annotator
        name = download_name(session.file.stem, who)
        return PlainTextResponse(
            session.export(who),
            media_type="application/x-ndjson",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    @app.post("/api/import", dependencies=[Depends(writer)])
    def import_labels(body: ImportIn) -> dict[str, int]:
        who = body.annotator.strip() or session.annotator
        try:
            return {"imported": session.import_text(body.text, who)}
        except AnnotationFileError as exc:
            raise HTTPException(400, str(exc)) from exc

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port); port 0 picks a free one. Errors name --port."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(
            f"cannot listen on {host}:{port} ({exc.strerror}); pick another --port"
        ) from exc
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    """The page's address for a bound socket (IPv6 hosts in brackets), as printed for the user to
    open."""
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/"
