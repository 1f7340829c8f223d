"""`beacon annotate FILE`, `beacon annotate sample RUN` and `beacon critic agreement A B ...`."""

from __future__ import annotations

import getpass
import logging
from pathlib import Path

import click
import typer
from typer.core import TyperGroup

from beacon.annotate.labels import LabelLog
from beacon.annotate.records import AnnotationFileError, load_rows
from beacon.annotate.sample import sample_run
from beacon.annotate.sources import compare_all, format_report, load_sources, report_json

logger = logging.getLogger(__name__)


class ServeByDefault(TyperGroup):
    """`beacon annotate FILE.jsonl` means `beacon annotate serve FILE.jsonl`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Prepend `serve` when the first argument is a file, not a subcommand or option, so the
        common case needs no subcommand."""
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["serve", *args]
        return super().parse_args(ctx, args)


annotate_app = typer.Typer(
    cls=ServeByDefault,
    no_args_is_help=True,
    help=(
        "Human stage labels for critic diagnoses: `beacon annotate FILE.jsonl` opens the "
        "labelling page; `beacon annotate sample RUN` draws a balanced sample to label."
    ),
)
critic_app = typer.Typer(no_args_is_help=True, help="Check a critic's stage labels.")


def _default_annotator() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "annotator"


@annotate_app.command("serve")
def serve_command(
    file: Path = typer.Argument(..., help="Annotation JSONL (docs/annotate.md)."),
    out: Path | None = typer.Option(
        None, "--out", help="Label log to append to; default FILE.labels.jsonl beside FILE."
    ),
    image_root: Path | None = typer.Option(
        None, "--image-root", help="ImageStore folder of the trajectories' image keys."
    ),
    annotator: str = typer.Option(
        _default_annotator(), "--annotator", help="Name the labels are saved under."
    ),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Interface to listen on; anything else exposes the data."
    ),
    port: int = typer.Option(8765, "--port", help="Port; 0 picks a free one."),
    allowed_host: list[str] = typer.Option(
        [],
        "--allowed-host",
        help="Another name the page is opened by (repeatable); only the bound address and its "
        "localhost aliases are answered otherwise.",
    ),
    browser: bool = typer.Option(True, "--browser/--no-browser", help="Open the page."),
) -> None:
    """Open the labelling page for FILE; labels are saved as they are made."""
    import uvicorn

    # lazy: fastapi stays out of `beacon --help`
    from beacon.annotate.server import Session, allowed_hosts, bind, create_app, url_of

    try:
        rows = load_rows(file)
    except AnnotationFileError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from exc
    log = LabelLog(out or file.with_name(f"{file.stem}.labels.jsonl"))
    session = Session(file=file, rows=rows, log=log, annotator=annotator, image_root=image_root)
    try:
        sock = bind(host, port)
    except OSError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from exc
    url = url_of(sock)
    typer.echo(f"annotating {len(rows)} rollouts of {file} as {annotator!r}; labels -> {log.path}")
    typer.echo(f"page: {url}  (Ctrl+C stops)", err=False)
    if browser:
        import webbrowser

        webbrowser.open(url)
    app = create_app(session, allowed_hosts(host, allowed_host))
    config = uvicorn.Config(app, log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


@annotate_app.command("sample")
def sample_command(
    run: Path = typer.Argument(..., help="An eval run folder (samples.jsonl, trajectories.jsonl)."),
    per_group_type: int = typer.Option(
        32, "--per-group-type", min=1, help="Groups of each type: all-correct, mixed, all-wrong."
    ),
    per_group: int = typer.Option(1, "--per-group", min=1, help="Rollouts drawn per group."),
    seed: int = typer.Option(0, "--seed", help="Seed of the draw."),
    critic: Path | None = typer.Option(
        None, "--critic", help="Critic JSONL: rows {group_id, rollout_id, stage, discrepancy}."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Annotation JSONL to write; default RUN/annotate/sample.jsonl."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing output file."),
) -> None:
    """Draw a balanced, seeded sample of tool-mode groups and write the annotation JSONL."""
    out = out or run / "annotate" / "sample.jsonl"
    if out.exists() and not force:
        typer.echo(
            f"error: {out} exists (labels may refer to it); pass --force to overwrite it or "
            "--out to write elsewhere.",
            err=True,
        )
        raise typer.Exit(code=1)
    try:
        rows = sample_run(run, out, per_group_type, per_group, seed, critic)
    except (FileNotFoundError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from exc
    counts = {
        t: sum(r["group_type"] == t for r in rows) for t in ("all_correct", "mixed", "all_wrong")
    }
    with_critic = sum(r["critic"] is not None for r in rows)
    typer.echo(f"wrote {len(rows)} rollouts to {out}: {counts}; {with_critic} with a critic label")
    typer.echo(f"label them: beacon annotate {out}")


@critic_app.command("agreement")
def agreement_command(
    sources: list[str] = typer.Argument(
        ...,
        help=(
            "Two or more label sources: FILE, FILE:label or FILE:critic (which labels of an "
            "annotation JSONL), or a label log (one source per annotator)."
        ),
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Also write the results as JSON."),
) -> None:
    """Exact-stage agreement, Cohen's κ and confusion matrix for every pair of sources."""
    try:
        loaded = load_sources(sources)
        results = compare_all(loaded)
    except (FileNotFoundError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from exc
    typer.echo(format_report(results))
    if json_out:
        json_out.write_text(report_json(results))
