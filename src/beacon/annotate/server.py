"""The annotation page's server: rows and images out, labels in, JSONL import and export.

A FastAPI app over one annotation JSONL (docs/annotate.md). The page is plain HTML/CSS/JS from
`static/`; there is no build step. Labels go to a `LabelLog` as they are made. The server binds
to 127.0.0.1 unless told otherwise: it serves the rollouts' images and text to anyone who can
reach it, and it has no authentication.

Images are served only by index into the table built at start-up (the rows' original images and
the trajectories' ImageStore keys), so no request can name a path.
"""

from __future__ import annotations

import json
import logging
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Body, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field

from beacon.annotate.labels import LabelLog
from beacon.annotate.records import (
    LABELS,
    AnnotationFileError,
    AnnotationRow,
    HumanLabel,
    Label,
    parse_rows,
)
from beacon.images import ImageStore

logger = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
DEFAULT_HOST = "127.0.0.1"


class LabelIn(BaseModel):
    """A label as the page posts it."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(description="Rollout id.")
    stage: Label | None = Field(description="Stage or SKIP; None saves a note alone.")
    note: str = Field("", description="Free-text note.")
    annotator: str = Field("", description="Who labels; empty means the server's default.")


@dataclass
class ImageTable:
    """Paths the server may serve, by index; `add` returns the index a page URL uses."""

    paths: list[Path] = field(default_factory=list)
    _index: dict[Path, int] = field(default_factory=dict)

    def add(self, path: Path) -> dict[str, Any]:
        path = path.resolve()
        if path not in self._index:
            self._index[path] = len(self.paths)
            self.paths.append(path)
        return {"url": f"api/images/{self._index[path]}", "name": path.name, "ok": path.exists()}


@dataclass
class Session:
    """One annotation file, its label log and the default annotator."""

    file: Path
    rows: list[AnnotationRow]
    log: LabelLog
    annotator: str
    image_root: Path | None = None
    images: ImageTable = field(default_factory=ImageTable)
    views: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
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


def create_app(session: Session) -> FastAPI:
    """The FastAPI app of one annotation session."""
    app = FastAPI(title="Beacon annotation", docs_url=None, redoc_url=None)

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

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

    @app.post("/api/labels")
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
        if not 0 <= index < len(session.images.paths) or not session.images.paths[index].exists():
            raise HTTPException(404, "image not found")
        return FileResponse(session.images.paths[index])

    @app.get("/api/export")
    def export(annotator: str = "") -> Response:
        who = annotator or session.annotator
        name = f"{session.file.stem}.{who}.labelled.jsonl"
        return PlainTextResponse(
            session.export(who),
            media_type="application/x-ndjson",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    @app.post("/api/import")
    def import_labels(request: Request, text: str = Body(..., media_type="text/plain")) -> dict:
        who = request.query_params.get("annotator") or session.annotator
        try:
            return {"imported": session.import_text(text, who)}
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
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/"
