"""`beacon sandbox ...`: run a code file on an image in the sandbox, from the shell."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import typer

from beacon.errors import UserError
from beacon.images import ImageError, load_image
from beacon.sandbox import Sandbox, SandboxConfig

app = typer.Typer(
    no_args_is_help=True,
    help="Run model-written Python on images in Beacon's isolated sandbox.",
)


@app.command("run")
def run(
    image: list[Path] = typer.Option(..., "--image", help="Input image (repeat for several)."),
    code: Path = typer.Option(..., "--code", help="Python file to run; '-' reads stdin."),
    out: Path = typer.Option(
        None,
        "--out",
        help="Folder where returned images are saved as PNG (default: a new temporary folder).",
    ),
    timeout: float = typer.Option(10.0, "--timeout", help="Wall-clock limit in seconds."),
    isolation: str = typer.Option(
        "auto", "--isolation", help="auto, bwrap, unshare or none (none is unsafe)."
    ),
) -> None:
    """Run CODE with `image` / `image_path` bound to IMAGE; print the result as JSON."""
    source = _read_inputs(image, code)
    config = SandboxConfig(timeout_s=timeout, isolation=isolation, num_workers=1)
    with Sandbox(config) as sandbox, sandbox.session(images=list(image)) as session:
        result = session.run(source)
        saved = []
        if result.images:
            out = out or Path(tempfile.mkdtemp(prefix="beacon_sandbox_"))
            out.mkdir(parents=True, exist_ok=True)
        for i, img in enumerate(result.images):
            path = out / f"image_{i}.png"
            img.save(path)
            saved.append(str(path))
        report = {
            "ok": result.ok,
            "stdout": result.stdout,
            "error": result.error,
            "timed_out": result.timed_out,
            "elapsed_s": round(result.elapsed_s, 4),
            "images": saved,
            "notes": result.notes,
            "repairs": result.repairs,
            "code": result.code,
            "isolation": sandbox.isolation,
        }
    typer.echo(json.dumps(report, indent=2))
    if not result.ok:
        raise typer.Exit(1)


def _read_inputs(images: list[Path], code: Path) -> str:
    """Check every image and read the code before any worker starts, so a bad input is one line."""
    for path in images:
        if not path.is_file():
            raise UserError(f"--image {path}: no such file; give a readable image file")
        try:
            load_image(path)
        except (ImageError, OSError):
            raise UserError(f"--image {path}: cannot decode it as an image") from None
    if str(code) == "-":
        return sys.stdin.read()
    try:
        return code.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or "not a readable text file"
        raise UserError(f"--code {code}: {reason}; give a Python file or '-' for stdin") from None
