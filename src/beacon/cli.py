"""`beacon` command line: one entry point, each job's commands live beside the job's code.

Sub-command modules import their heavy dependencies (torch, transformers) inside the command
functions, so `beacon --help` stays fast.
"""

from __future__ import annotations

import logging

import typer

from beacon import __version__
from beacon.agent import cli as agent_cli
from beacon.annotate import cli as annotate_cli
from beacon.benchmarks import cli as benchmarks_cli
from beacon.engines import cli as engines_cli
from beacon.eval import cli as eval_cli
from beacon.revue import cli as revue_cli
from beacon.sandbox import cli as sandbox_cli
from beacon.train import cli as train_cli

app = typer.Typer(
    name="beacon",
    help=(
        "Beacon: agentic visual reasoning. Evaluate vision-language models with and without "
        "code tools, and see whether their tool use is adaptive and helps."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"beacon {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug messages."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Beacon command line."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


app.add_typer(sandbox_cli.app, name="sandbox")
app.add_typer(engines_cli.tiny_app, name="tiny")
app.add_typer(benchmarks_cli.app, name="bench")
app.add_typer(annotate_cli.annotate_app, name="annotate")
app.add_typer(annotate_cli.critic_app, name="critic")
app.add_typer(train_cli.app, name="train")
app.add_typer(revue_cli.app, name="revue")
app.command("serve")(engines_cli.serve)
app.command("run")(agent_cli.run)
app.command("eval", epilog=eval_cli.EVAL_EPILOG)(eval_cli.eval_command)
app.command("report")(eval_cli.report_command)


if __name__ == "__main__":
    app()
