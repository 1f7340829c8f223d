"""`beacon bench list` and `beacon bench show`: what is registered, and does my local copy load."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from beacon.benchmarks import UnknownBenchmarkError, get_benchmark, list_benchmarks
from beacon.images import load_image

if TYPE_CHECKING:
    from beacon.benchmarks.base import Benchmark

app = typer.Typer(
    no_args_is_help=True, help="List benchmarks and check that a local copy of one loads."
)


@app.command("list")
def list_command() -> None:
    """Every registered benchmark: name, hub source, categories, description."""
    for name in list_benchmarks():
        bench = get_benchmark(name)
        source = "built-in" if bench.hub is None else f"{bench.hub}@{bench.revision}"
        if bench.hub is not None and bench.split:
            source += f" [{bench.split}]"
        typer.echo(f"{name:<20} {source}")
        typer.echo(f"{'':<20} {bench.description}")
        if bench.categories:
            typer.echo(f"{'':<20} categories: {', '.join(bench.categories)}")


@app.command("show")
def show_command(
    name: str = typer.Argument(..., help="Benchmark name, e.g. synth or mathvista."),
    path: Path | None = typer.Option(
        None, "--path", help="Local file or folder in the benchmark's published format."
    ),
    limit: int = typer.Option(3, "--limit", help="How many samples to print."),
    seed: int = typer.Option(0, "--seed", help="Seed for generation / option shuffling."),
    out: Path | None = typer.Option(
        None, "--out", help="Folder to save each sample's images to (PNG)."
    ),
) -> None:
    """Print the first samples' prompts, answers and metadata; optionally save their images."""
    try:
        bench = get_benchmark(name)
    except UnknownBenchmarkError as exc:
        raise typer.BadParameter(str(exc), param_hint="NAME") from exc
    try:
        _show(bench, path, limit, seed, out)
    except (FileNotFoundError, ValueError) as exc:
        typer.echo(f"error: {bench.name} could not be loaded from {path}: {exc}", err=True)
        raise typer.Exit(code=1) from exc


def _show(bench: Benchmark, path: Path | None, limit: int, seed: int, out: Path | None) -> None:
    for sample in bench.load(path=path, limit=limit, seed=seed):
        typer.echo(f"--- {bench.name}/{sample.id}  [{sample.answer_type}]")
        typer.echo(bench.prompt(sample))
        typer.echo(f"answer: {sample.answer}")
        shown = {k: v for k, v in sample.metadata.items() if k != "annotation"}
        typer.echo(f"metadata: {shown}")
        typer.echo(f"images: {len(sample.images)}")
        if out is not None:
            for path_saved in _save_images(sample.images, out, f"{bench.name}_{sample.id}"):
                typer.echo(f"saved {path_saved}")


def _save_images(images: list, folder: Path, stem: str) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    saved = []
    for index, source in enumerate(images):
        target = folder / f"{stem.replace('/', '_')}_{index}.png"
        load_image(source).save(target)
        saved.append(target)
    return saved
