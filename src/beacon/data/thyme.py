"""Import Thyme's public SFT data into Beacon trajectories, so the SFT trainer can use it.

Thyme's rows come in three shapes, all read here:

1. the repository README's `{"image": [...], "question": "<image>\\n...", "response": "..."}`;
2. ms-swift's `{"messages": [{"role", "content"}], "images": [...]}`;
3. ShareGPT's `{"conversations": [{"from": "human"|"gpt"|"system", "value"}], "image(s)": ...}`.

`<image>` placeholders in the text take the row's images in order: the original image(s) in the
question first, then one per image inside each `<sandbox_output>`. The assistant text becomes
role-tagged text segments the way the agent loop records a Thyme episode: generated text up to
and including `<code>`, the code (`kind="code"`) up to and including `</code>`, the sandbox
output as an observation (no loss; the whitespace Thyme's rows put before it goes with it), and so
on. The prompt is the agent's text form of the chat
(`role: content` blocks, `<image>` placeholders), which the trainer renders with the student's
chat template. Segments carry text only: the trainer tokenizes them one segment at a time, so
the boundaries (and the loss mask) stay exact.

Image paths are read only under the image root (`--images`, else the source file's folder):
through `beacon.files.read_file`, so a row's `../` or a symlink out of the root, a FIFO, a
device or a file over the size cap drops that row, counted under `image_<reason>`, instead of
ending the import.

What is not covered: rows with more than one assistant turn (dropped as `multi_turn_chat`,
counted), and remote image URLs (download them first, as Thyme's README says).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from beacon.agent.formats import THYME
from beacon.data.records import SFT_FILE, StageSummary
from beacon.files import FileRefused, read_file
from beacon.images import ImageError, ImageStore, load_image
from beacon.jsonl import read_jsonl, write_jsonl_atomic
from beacon.progress import track
from beacon.types import Segment, ToolCall, Trajectory

logger = logging.getLogger(__name__)

IMAGE = "<image>"
_ROLES = {"human": "user", "gpt": "assistant", "user": "user", "assistant": "assistant"}
_BLOCKS = re.compile(r"(<code>.*?</code>|<sandbox_output>.*?</sandbox_output>)", re.S)


class SkipRow(ValueError):
    """A row that cannot become a trajectory; the message is the summary's drop reason."""


@dataclass
class ThymeRow:
    """One row in the shape-independent form: chat messages and image paths."""

    messages: list[dict[str, str]]
    images: list[str] = field(default_factory=list)
    row_id: str | None = None


def normalize_row(row: dict[str, Any]) -> ThymeRow:
    """Any of the three shapes as messages + images (module docstring)."""
    images = row.get("images", row.get("image")) or []
    images = [images] if isinstance(images, str) else list(images)
    row_id = row.get("id")
    if "messages" in row:
        messages = [{"role": m["role"], "content": m["content"]} for m in row["messages"]]
    elif "conversations" in row:
        messages = [
            {"role": _ROLES.get(m["from"], m["from"]), "content": m["value"]}
            for m in row["conversations"]
        ]
    elif "question" in row and "response" in row:
        messages = [
            {"role": "user", "content": row["question"]},
            {"role": "assistant", "content": row["response"]},
        ]
    else:
        raise SkipRow("unknown_shape")
    return ThymeRow(messages, [str(i) for i in images], None if row_id is None else str(row_id))


def assistant_segments(text: str) -> list[Segment]:
    """Thyme assistant text as generated / code / observation segments (module docstring)."""
    segments: list[Segment] = []
    pending = ""
    for piece in _BLOCKS.split(text):
        if not piece:
            continue
        if piece.startswith(THYME.call_open):
            segments.append(Segment(role="generated", text=pending + THYME.call_open))
            code = piece[len(THYME.call_open) :]
            segments.append(Segment(role="generated", text=code, kind="code"))
            pending = ""
        elif piece.startswith(THYME.observation_open):
            if pending.strip():
                segments.append(Segment(role="generated", text=pending))
                pending = ""
            # Whitespace between </code> and <sandbox_output> goes with the observation (no
            # loss): at inference the observation follows the </code> stop directly.
            segments.append(Segment(role="observation", text=pending + piece))
            pending = ""
        else:
            pending += piece
    if pending:
        segments.append(Segment(role="generated", text=pending))
    return segments


def row_trajectory(row: ThymeRow, store: ImageStore, image_root: Path, n: int) -> Trajectory:
    """One trajectory with its images (files under `image_root`) put into `store`; SkipRow says
    why not."""
    roles = [m["role"] for m in row.messages]
    if roles.count("assistant") != 1 or roles[-1] != "assistant":
        raise SkipRow("multi_turn_chat" if roles.count("assistant") > 1 else "no_response")
    prompt_text = "\n".join(f"{m['role']}: {m['content']}" for m in row.messages[:-1])
    segments = [Segment(role="prompt", text=prompt_text)]
    segments += assistant_segments(row.messages[-1]["content"])
    needed = sum(s.text.count(IMAGE) for s in segments)
    if needed != len(row.images):
        raise SkipRow("image_count_mismatch")
    keys = iter([_store_image(store, path, image_root) for path in row.images])
    for segment in segments:
        segment.images = [next(keys) for _ in range(segment.text.count(IMAGE))]
    response = "".join(s.text for s in segments[1:] if s.role == "generated")
    answer = THYME.final_answer(response)
    return Trajectory(
        sample_id=row.row_id or f"thyme-{n}",
        mode="tool",
        format=THYME.name,
        segments=segments,
        final_answer=answer,
        finish_reason="answer" if answer is not None else "stop",
        tool_calls=_tool_calls(segments),
        metadata={"source": "thyme", "row": n},
    )


def _tool_calls(segments: list[Segment]) -> list[ToolCall]:
    """Each code segment with the observation that follows it (Thyme ran it when recording)."""
    calls = []
    for i, segment in enumerate(segments):
        if segment.kind != "code":
            continue
        after = segments[i + 1] if i + 1 < len(segments) else None
        observed = after is not None and after.role == "observation"
        stdout = after.text.strip() if observed else ""
        stdout = stdout.removeprefix(THYME.observation_open).removesuffix(THYME.observation_close)
        calls.append(
            ToolCall(
                code=THYME.parse_call(THYME.call_open + segment.text).code or segment.text,
                executed=observed,
                ok=observed,
                stdout=stdout.replace(IMAGE, "").strip(),
                images=list(after.images) if observed else [],
            )
        )
    return calls


def _store_image(store: ImageStore, path: str, image_root: Path) -> str:
    if path.startswith(("http://", "https://")):
        raise SkipRow("remote_image")
    try:
        data = read_file(_locate(Path(path), image_root), image_root)
    except FileRefused as exc:
        reason = "missing_image" if exc.reason == "missing" else f"image_{exc.reason}"
        raise SkipRow(reason) from None
    try:
        return store.put(load_image(data))
    except ImageError:
        raise SkipRow("bad_image") from None


def _locate(path: Path, image_root: Path) -> Path:
    """Where a row's image is: under `image_root` for a relative path; for an absolute path, the
    path itself when it is under `image_root`, else (the machine that recorded the data: Thyme's
    rows name `/mllm_hdd/...`) the same path under `image_root`, else its file name there."""
    if not path.is_absolute():
        return image_root / path
    if path.is_relative_to(image_root.absolute()):
        return path
    under = image_root / path.relative_to(path.anchor)
    return under if under.exists() else image_root / path.name


def read_rows(source: Path) -> Iterator[dict[str, Any]]:
    """Rows of a .jsonl file or of a .json list."""
    if source.suffix == ".json":
        data = json.loads(source.read_text(encoding="utf-8"))
        yield from data if isinstance(data, list) else [data]
        return
    yield from read_jsonl(source, whole=True)


def import_thyme(
    source: Path, out: Path, image_root: Path | None = None, progress: bool = True
) -> StageSummary:
    """Write out/trajectories.jsonl and out/images/ from a Thyme SFT file; return the counts.

    The import is one pass over a local file and is rewritten whole (atomically) on a rerun;
    images already in the store are not encoded again. Images are read only under `image_root`,
    by default the source file's folder.
    """
    image_root = image_root or source.parent
    store = ImageStore(out / "images")
    summary = StageSummary(stage="import_thyme")
    rows = []
    rows_in = track(read_rows(source), "import-thyme", unit="row", enabled=progress)
    for n, raw in enumerate(rows_in):
        summary.total += 1
        try:
            rows.append(row_trajectory(normalize_row(raw), store, image_root, n).to_json())
        except SkipRow as exc:
            summary.drop(str(exc))
        except (KeyError, TypeError, AttributeError):
            summary.drop("malformed_row")
    summary.kept = write_jsonl_atomic(out / SFT_FILE, rows)
    summary.write(out)
    logger.info("%s", summary.line())
    return summary
