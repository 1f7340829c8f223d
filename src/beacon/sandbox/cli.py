"""`beacon sandbox ...`: run a code file on an image in the sandbox, from the shell."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

app = typer.Typer(
    no_args_is_help=True,
    help="Run model-written Python on images in Beacon's isolated sandbox.",
)


@app.command("run")
def run(
    image: list[Path] = typer.Option(..., "--image", help="Input image (repeat for several)."),
    code: Path = typer.Option(..., "--code", help="Python file to run; '-' reads stdin."),
    out: Path = typer.Option(
        Path("sandbox_out"), "--out", help="Folder where returned images are saved as PNG."
    ),
    timeout: float = typer.Option(10.0, "--timeout", help="Wall-clock limit in seconds."),
    isolation: str = typer.Option(
        "auto", "--isolation", help="auto, bwrap, unshare or none (none is unsafe)."
    ),
) -> None:
    """Run CODE with `image` / `image_path` bound to IMAGE; print the result as JSON."""
    from beacon.sandbox import Sandbox, SandboxConfig

    source = sys.stdin.read() if str(code) == "-" else code.read_text()
    config = SandboxConfig(timeout_s=timeout, isolation=isolation, num_workers=1)
    with Sandbox(config) as sandbox, sandbox.session(images=list(image)) as session:
        result = session.run(source)
        saved = []
        if result.images:
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
