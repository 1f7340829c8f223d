"""`beacon` command line: one entry point, each job's commands live beside the job's code.

Sub-command modules import their heavy dependencies (torch, transformers) inside the command
functions, so `beacon --help` stays fast.

One error path (`main`): a usage mistake, a config error, a `beacon.errors.UserError` raised
anywhere below, or an input file that is missing, unreadable or not an image prints one line on
stderr (a config error with several problems lists each on its
own line) and exits with status 2; Ctrl-C says how to resume and exits with 130. Anything else
is a bug and keeps its traceback.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import typer

from beacon import __version__
from beacon.agent import cli as agent_cli
from beacon.annotate import cli as annotate_cli
from beacon.benchmarks import cli as benchmarks_cli
from beacon.config import ConfigError
from beacon.configs import cli as configs_cli
from beacon.data import cli as data_cli
from beacon.demo import cli as demo_cli
from beacon.engines import cli as engines_cli
from beacon.errors import UserError
from beacon.eval import cli as eval_cli
from beacon.images import ImageError
from beacon.progress import quiet_library_bars
from beacon.report import cli as report_cli
from beacon.report import revue_analysis as revue_cli
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
def _options(
    verbose: bool = typer.Option(False, "--verbose", "-v", metavar="", help="Log debug messages."),
    version: bool = typer.Option(
        False,
        "--version",
        metavar="",
        callback=_version,
        is_eager=True,
        help="Print the version and exit.",
    ),
) -> None:
    """Beacon command line."""
    quiet_library_bars()
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
app.add_typer(data_cli.app, name="data")
revue_cli.app.command("serve-teacher")(train_cli.serve_teacher_command)
app.add_typer(revue_cli.app, name="revue")
app.add_typer(configs_cli.app, name="configs")
app.command("serve")(engines_cli.serve)
app.command("run")(agent_cli.run)
app.command("eval", epilog=eval_cli.EVAL_EPILOG)(eval_cli.eval_command)
app.command("report")(report_cli.report_command)
app.command("demo", epilog=demo_cli.DEMO_EPILOG)(demo_cli.demo_command)


# A file the user named that is missing, unreadable or not an image: their input, not our bug.
_BAD_INPUT_FILE = (ImageError, FileNotFoundError, IsADirectoryError, NotADirectoryError,
                   PermissionError)  # fmt: skip


def error_line(exc: BaseException) -> str:
    """The one line (or, for several config problems, one line per problem) a user sees."""
    if isinstance(exc, ConfigError) and len(exc.problems) == 1:
        return f"config error in {exc.source}: {exc.problems[0]}"
    if isinstance(exc, ConfigError):
        return str(exc)
    if isinstance(exc, typer.TyperException):
        command = exc.ctx.command_path if getattr(exc, "ctx", None) else "beacon"
        return f"error: {' '.join(exc.format_message().split())} (see {command} --help)"
    return f"error: {' '.join(str(exc).split())}"


def main(argv: Sequence[str] | None = None) -> None:
    """Run the `beacon` command line with the one error path (see the module docstring)."""
    try:
        code = app(args=list(argv) if argv is not None else None, standalone_mode=False)
    except typer.TyperException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # `beacon` alone, or `beacon tiny`
            typer.echo(exc.ctx.get_help())
            sys.exit(2)
        typer.echo(error_line(exc), err=True)
        sys.exit(2)
    except (ConfigError, UserError, *_BAD_INPUT_FILE) as exc:
        typer.echo(error_line(exc), err=True)
        sys.exit(2)
    except (KeyboardInterrupt, typer.Abort):
        typer.echo("interrupted; rerun the same command to resume where it stopped", err=True)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
