"""`beacon run`: one episode on one image, printed readably — the first thing to try."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from beacon.agent.config import AgentConfig
from beacon.agent.episode import EpisodeSpec
from beacon.agent.loop import AgentLoop
from beacon.agent.render import render_trajectory
from beacon.config import ConfigError, load_config
from beacon.engines import EngineConfig, build_engine
from beacon.errors import UserError
from beacon.images import ImageError, ImageStore, load_image
from beacon.sandbox import Sandbox
from beacon.types import Sample


def run(
    image: Path = typer.Option(..., exists=True, dir_okay=False, help="The input image."),
    question: str = typer.Option(..., help="The question to ask about the image."),
    model: str = typer.Option("tiny", help='Model path or hub name; "tiny" = built-in tiny model.'),
    engine: str = typer.Option("hf", help="Engine: hf, openai or vllm."),
    base_url: str = typer.Option("http://127.0.0.1:8000/v1", help="openai engine: server /v1."),
    api_key: str = typer.Option(
        None,
        "--api-key",
        help="openai engine: the server's API key (else $OPENAI_API_KEY); never written out.",
    ),
    mode: str = typer.Option(
        "tool", help="tool (code runs in the sandbox), notool, or gated (p_tool picks one)."
    ),
    gate_threshold: float = typer.Option(
        0.7, help="gated: p_tool below this runs notool, at or above it tool."
    ),
    format_: str = typer.Option("thyme", "--format", help="Tool protocol: thyme or tool_call."),
    max_turns: int = typer.Option(6, help="Assistant turns at most."),
    max_new_tokens: int = typer.Option(1024, help="New tokens per turn at most."),
    temperature: float = typer.Option(0.0, help="Sampling temperature (0 = greedy)."),
    out: Path = typer.Option(None, help="Folder for the trajectory JSON and its images."),
    show_prompt: bool = typer.Option(
        False, "--show-prompt", metavar="", help="Also print the rendered prompt."
    ),
    json_: bool = typer.Option(
        False, "--json", metavar="", help="Print the trajectory as JSON instead."
    ),
) -> None:
    """Run one episode and print the trajectory: reasoning, code, observations, answer."""
    if mode not in ("tool", "notool", "gated"):
        raise typer.BadParameter(f"--mode must be tool, notool or gated, got {mode!r}")
    try:
        agent = load_config(
            AgentConfig,
            overrides=[
                f"format={format_}",
                f"max_turns={max_turns}",
                f"max_new_tokens_per_turn={max_new_tokens}",
                f"temperature={temperature}",
                f"gate.threshold={gate_threshold}",
            ],
        )
        engine_cfg = load_config(
            EngineConfig, overrides=[f"name={engine}", f"model={model}", f"base_url={base_url}"]
        )
    except ConfigError as exc:
        raise typer.BadParameter("; ".join(exc.problems)) from None
    try:
        load_image(image)
    except (ImageError, OSError):
        raise UserError(
            f"--image {image}: cannot be read as an image; give a PNG or JPEG file"
        ) from None
    store = ImageStore(out / "images") if out else None
    sample = Sample(id=image.stem, images=[image], question=question, answer="")
    eng = build_engine(engine_cfg, api_key)
    try:
        sandbox = None
        if mode != "notool":
            sandbox = Sandbox()
        try:
            with AgentLoop(eng, sandbox, agent, store=store) as loop:
                (trajectory,) = loop.run([EpisodeSpec(sample, mode=mode)])
        finally:
            if sandbox is not None:
                sandbox.close()
    finally:
        eng.close()
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "trajectory.json").write_text(trajectory.to_json() + "\n")
    if json_:
        typer.echo(json.dumps(json.loads(trajectory.to_json()), indent=2))
    else:
        typer.echo(render_trajectory(trajectory, show_prompt=show_prompt))
    if trajectory.finish_reason in ("engine_error", "sandbox_error", "input_error"):
        typer.echo(f"error: {trajectory.finish_reason}: {trajectory.error}", err=True)
        raise typer.Exit(1)
