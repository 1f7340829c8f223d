"""`beacon configs list|cp`, and the one `--config` option every command that reads a config takes.

The option accepts a file or a shipped config's name (`beacon.configs.resolve_config`), so
`beacon train grpo --config grpo_tiny` works from any folder after a wheel install.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from beacon.configs import config_path, resolve_config, shipped
from beacon.errors import UserError

app = typer.Typer(
    help="The configs shipped with Beacon: list them, copy one out to edit. Every --config "
    "option takes their names as well as paths.",
    no_args_is_help=True,
)

CP_EPILOG = """
Examples:

  beacon configs cp grpo_tiny .                 # ./grpo_tiny.yaml
  beacon configs cp sft_tiny my_sft.yaml
  beacon configs cp fsdp . && accelerate launch --config_file fsdp.yaml -m beacon train sft ...
"""


def _resolve(value: Path | None) -> Path | None:
    return None if value is None else resolve_config(value)


def config_option(help: str, required: bool = False) -> Any:
    """A `--config/-c` option whose value is a YAML path or a shipped config's name; the command
    receives the file's path. An unknown name is one error line listing the shipped names."""
    return typer.Option(
        ... if required else None,
        "--config",
        "-c",
        metavar="NAME|PATH",
        callback=_resolve,
        help=f"{help} A YAML file or a shipped config's name (beacon configs list).",
    )


@app.command("list")
def list_command() -> None:
    """Every shipped config: its name, its folder and what it is for."""
    configs = shipped().values()
    width = max(len(c.name) for c in configs)
    kind_width = max(len(c.kind) for c in configs)
    for c in configs:
        typer.echo(f"{c.name.ljust(width)}  {c.kind.ljust(kind_width)}  {c.summary}".rstrip())


@app.command("cp", epilog=CP_EPILOG)
def cp_command(
    name: str = typer.Argument(..., help="A shipped config's name (beacon configs list)."),
    dest: Path = typer.Argument(
        Path("."), help="Folder (gets NAME.yaml) or file to write; default: this folder."
    ),
) -> None:
    """Copy a shipped config out to edit; it never overwrites a file."""
    source = config_path(name)
    target = dest / source.name if dest.is_dir() else dest
    if target.exists():
        raise UserError(
            f"{target} exists; remove it first or give another DEST "
            f"(beacon configs cp {source.stem} other.yaml)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    typer.echo(str(target))
