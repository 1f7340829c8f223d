"""Placeholder: filled in by the module's owner."""

import typer

tiny_app = typer.Typer(no_args_is_help=True)


def serve() -> None:
    """Serve a model over an OpenAI-compatible HTTP API."""
