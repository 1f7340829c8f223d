"""`beacon tiny make DIR` and `beacon serve --model PATH`.

Heavy imports (torch, transformers, uvicorn) happen inside the commands so `beacon --help`
stays fast.
"""

from __future__ import annotations

from pathlib import Path

import typer

tiny_app = typer.Typer(
    no_args_is_help=True, help="Build tiny random Qwen-VL checkpoints offline (tests, demos)."
)


@tiny_app.callback()
def tiny() -> None:
    """Build tiny random Qwen-VL checkpoints offline (tests, demos)."""


@tiny_app.command("make")
def make(
    out_dir: Path = typer.Argument(..., help="Folder to write the checkpoint into."),
    arch: str = typer.Option("qwen2_vl", "--arch", help="qwen2_vl, qwen2_5_vl or qwen3_vl."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random weights."),
) -> None:
    """Build a tiny random vision-language model with its tokenizer, processor and template."""
    from beacon.engines.tiny import ARCHS, make_tiny_model

    if arch not in ARCHS:
        raise typer.BadParameter(f"--arch {arch!r}: choose one of {', '.join(ARCHS)}")
    path = make_tiny_model(out_dir, arch=arch, seed=seed)  # type: ignore[arg-type]
    typer.echo(f"tiny {arch} model written to {path}")


def serve(
    model: str = typer.Option(..., "--model", help="Checkpoint folder (or hub id) to serve."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on."),
    port: int = typer.Option(8000, "--port", help="TCP port."),
    engine: str = typer.Option("hf", "--engine", help="Engine behind the server: hf or vllm."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda (hf engine)."),
    batch_size: int = typer.Option(8, "--batch-size", help="Most requests run together."),
    served_model_name: str = typer.Option(
        None, "--served-model-name", help="Name clients use in 'model' (default: --model)."
    ),
) -> None:
    """Serve a model over an OpenAI-compatible HTTP API (chat completions with images)."""
    import uvicorn

    from beacon.engines import load_engine
    from beacon.engines.serve import create_app

    if engine not in ("hf", "vllm"):
        raise typer.BadParameter(f"--engine {engine!r}: choose hf or vllm")
    kwargs = {"device": device, "batch_size": batch_size} if engine == "hf" else {}
    backend = load_engine(engine, model, **kwargs)
    app = create_app(backend, model_name=served_model_name or model, max_batch=batch_size)
    uvicorn.run(app, host=host, port=port, log_level="info")
