"""`beacon tiny make DIR` and `beacon serve --model PATH`.

Heavy imports (torch, transformers, uvicorn) happen inside the commands so `beacon --help`
stays fast. `beacon serve` prints a warning before loading the model when it would listen
beyond loopback without an API key.
"""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import ValidationError

from beacon.engines import load_engine
from beacon.engines.serve_guard import API_KEY_ENV, ServeSettings, exposure_warning
from beacon.engines.tiny import ARCHS, make_tiny_model

SERVE_DTYPES = ("auto", "float32", "bfloat16", "float16")
"""`beacon serve --dtype` choices (the names torch and vLLM both take)."""

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
    if arch not in ARCHS:
        raise typer.BadParameter(f"--arch {arch!r}: choose one of {', '.join(ARCHS)}")
    path = make_tiny_model(out_dir, arch=arch, seed=seed)  # type: ignore[arg-type]
    typer.echo(f"tiny {arch} model written to {path}")


def serve(
    model: str = typer.Option(..., "--model", help="Checkpoint folder (or hub id) to serve."),
    host: str = typer.Option(
        "127.0.0.1",
        "--host",
        help="Interface to listen on; beyond loopback without --api-key the server starts with a "
        "warning, so set one.",
    ),
    port: int = typer.Option(8000, "--port", help="TCP port."),
    engine: str = typer.Option("hf", "--engine", help="Engine behind the server: hf or vllm."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda (hf engine)."),
    dtype: str = typer.Option(
        "auto",
        "--dtype",
        help="Weights' dtype: auto (hf: float32 on cpu, bfloat16 on cuda), float32, bfloat16, "
        "float16. Weight pushes arrive cast to it.",
    ),
    batch_size: int = typer.Option(8, "--batch-size", help="Most requests run together."),
    served_model_name: str = typer.Option(
        None, "--served-model-name", help="Name clients use in 'model' (default: --model)."
    ),
    api_key: str = typer.Option(
        None,
        "--api-key",
        envvar=API_KEY_ENV,
        help="Every route but /health needs 'Authorization: Bearer KEY'.",
    ),
    allowed_local_media_path: Path = typer.Option(
        None,
        "--allowed-local-media-path",
        help="Folder whose files clients may name as images (file:// or paths); default none.",
    ),
    allow_weight_updates: bool = typer.Option(
        False, "--allow-weight-updates", help="Accept POST /beacon/update_weights (RL sync)."
    ),
    max_body_bytes: int = typer.Option(
        ServeSettings.model_fields["max_body_bytes"].default,
        "--max-body-bytes",
        help="Largest request body, and largest local image file (413 above).",
    ),
    max_model_len: int = typer.Option(
        None, "--max-model-len", help="Prompt + max_tokens limit (default: the model's context)."
    ),
    max_tokens_limit: int = typer.Option(
        ServeSettings.model_fields["max_tokens_limit"].default,
        "--max-tokens-limit",
        help="Most new tokens one request may ask for (400 above).",
    ),
    max_image_pixels: int = typer.Option(
        ServeSettings.model_fields["max_image_pixels"].default,
        "--max-image-pixels",
        help="Pixels the images of one request may have together, checked before decoding.",
    ),
    chunk_tokens: int = typer.Option(
        ServeSettings.model_fields["chunk_tokens"].default,
        "--chunk-tokens",
        help="New tokens a request generates before waiting requests get a turn; 0: whole.",
    ),
) -> None:
    """Serve a model over an OpenAI-compatible HTTP API (chat completions with images).

    The server trusts no client: see docs/engines.md, "Security".
    """
    import uvicorn

    # lazy: torch and fastapi stay out of `beacon --help`
    from beacon.engines.serve import create_app

    if engine not in ("hf", "vllm"):
        raise typer.BadParameter(f"--engine {engine!r}: choose hf or vllm")
    if dtype not in SERVE_DTYPES:
        raise typer.BadParameter(f"--dtype {dtype!r}: choose one of {', '.join(SERVE_DTYPES)}")
    try:
        settings = ServeSettings(
            api_key=api_key,
            allowed_local_media_path=allowed_local_media_path,
            allow_weight_updates=allow_weight_updates,
            max_body_bytes=max_body_bytes,
            max_model_len=max_model_len,
            max_tokens_limit=max_tokens_limit,
            max_image_pixels=max_image_pixels,
            chunk_tokens=chunk_tokens,
        )
    except ValidationError as exc:
        raise typer.BadParameter(_settings_errors(exc)) from None
    warning = exposure_warning(host, settings.api_key, settings.allow_weight_updates)
    if warning is not None:
        typer.secho(warning, err=True, fg=typer.colors.RED, bold=True)
    kwargs = {"device": device, "batch_size": batch_size} if engine == "hf" else {}
    backend = load_engine(engine, model, dtype=dtype, **kwargs)
    app = create_app(backend, served_model_name or model, settings, max_batch=batch_size)
    uvicorn.run(app, host=host, port=port, log_level="info")


def _settings_errors(exc: ValidationError) -> str:
    """Pydantic's findings as `--flag: message` lines."""
    return "; ".join(
        f"--{str(error['loc'][0]).replace('_', '-')}: {error['msg']}" for error in exc.errors()
    )
