"""`beacon eval`: evaluate a model into a run folder; `beacon report` is `beacon.report.cli`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import typer

from beacon.config import format_describe, load_config
from beacon.configs.cli import config_option
from beacon.errors import UserError
from beacon.eval.config import EvalConfig
from beacon.eval.runner import InfrastructureErrors, run_eval
from beacon.runfolder import CONFIG_FILE, SUMMARY_FILE

EVAL_EPILOG = """
Examples:

  beacon eval                                   # tiny model on the built-in synth benchmark

  beacon eval --model Qwen/Qwen2.5-VL-7B-Instruct --bench synth,vstar --limit 50

  beacon eval --engine openai --base-url http://localhost:8000/v1 --model my-model \\
      --bench hrbench_4k --samples 4 --set agent.temperature=1.0 --concurrency 64

Rerunning the same command with the same --out resumes where it stopped.
"""


def _split(values: str | None) -> list[str] | None:
    return None if values is None else [v.strip() for v in values.split(",") if v.strip()]


def _overrides(
    model: str | None,
    engine: str | None,
    base_url: str | None,
    bench: str | None,
    modes: str | None,
    samples: int | None,
    concurrency: int | None,
    limit: int | None,
    out: str | None,
    data: list[str],
) -> list[str]:
    """Turn the convenience flags into `--set` overrides, so one validator checks them all."""
    sets = []
    pairs = {
        "engine.model": model,
        "engine.name": engine,
        "engine.base_url": base_url,
        "samples": samples,
        "concurrency": concurrency,
        "limit": limit,
        "out": out,
    }
    sets += [f"{k}={v}" for k, v in pairs.items() if v is not None]
    if bench is not None:
        sets.append(f"benchmarks=[{','.join(_split(bench))}]")
    if modes is not None:
        sets.append(f"modes=[{','.join(_split(modes))}]")
    for entry in data:
        name, sep, path = entry.partition("=")
        if not sep:
            raise typer.BadParameter(f"--data expects NAME=PATH, got {entry!r}")
        sets.append(f"data.{name}={path}")
    return sets


CONFIG = config_option("The eval config.")


def eval_command(
    model: str = typer.Option(None, help='Model path or hub name; "tiny" = built-in tiny model.'),
    engine: str = typer.Option(None, help="Engine: hf, openai or vllm."),
    base_url: str = typer.Option(None, help="openai engine: server address, e.g. .../v1."),
    api_key: str = typer.Option(
        None,
        "--api-key",
        help="openai engine: the server's API key, used and never written to the run folder; "
        "the variable engine.api_key_env names (OPENAI_API_KEY) keeps it out of `ps` too.",
    ),
    bench: str = typer.Option(None, help="Comma-separated benchmarks (see `beacon bench list`)."),
    modes: str = typer.Option(
        None, help="Comma-separated modes: tool,notool,gated (gated: p_tool picks one)."
    ),
    samples: int = typer.Option(None, help="K samples per item and mode."),
    concurrency: int = typer.Option(None, help="Episodes in flight."),
    limit: int = typer.Option(None, help="Items per benchmark (default: all)."),
    out: str = typer.Option(None, help="Run folder (default runs/eval); reruns resume."),
    data: list[str] = typer.Option(
        [], "--data", help="Local benchmark file: NAME=PATH (repeatable)."
    ),
    config: Path = CONFIG,
    set_: list[str] = typer.Option([], "--set", help="Override a setting: a.b=value."),
    show_config: bool = typer.Option(
        False,
        "--show-config",
        metavar="",
        help="Print every setting as resolved (flags, --config, --set applied) with its help "
        "and exit.",
    ),
    no_progress: bool = typer.Option(False, "--no-progress", metavar="", help="No progress bar."),
) -> None:
    """Evaluate a model on benchmarks with and without tools; write samples, summary, report."""
    overrides = _overrides(
        model, engine, base_url, bench, modes, samples, concurrency, limit, out, data
    )
    cfg = load_config(EvalConfig, path=config, overrides=[*overrides, *set_])
    if show_config:
        typer.echo(format_describe(EvalConfig, cfg))
        raise typer.Exit()
    # lazy: matplotlib stays out of `beacon --help`
    from beacon.report.eval_runs import report_eval_run

    created = _first_missing(Path(cfg.out))
    try:
        summary = run_eval(cfg, progress=not no_progress, api_key=api_key)
    except UserError:
        _remove_if_untouched(Path(cfg.out), created)
        raise
    except InfrastructureErrors as exc:
        if cfg.report:  # the summary and the report cover the episodes that finished
            report_eval_run(cfg)
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if cfg.report:
        report_eval_run(cfg, summary)
    _print_headline(summary, Path(cfg.out))


def _first_missing(out: Path) -> Path | None:
    """The outermost folder of `out` that does not exist yet (the run would create it)."""
    missing = [p for p in (out, *out.absolute().parents) if not p.exists()]
    return missing[-1] if missing else None


def _remove_if_untouched(out: Path, created: Path | None) -> None:
    """A refused run (hub data unreachable, ...) leaves no folder that holds only its config."""
    if created is None or not out.is_dir() or {p.name for p in out.iterdir()} - {CONFIG_FILE}:
        return
    shutil.rmtree(out)
    for parent in out.absolute().parents:
        if not parent.is_relative_to(created.absolute()) or any(parent.iterdir()):
            break
        parent.rmdir()


def _print_headline(summary: dict, out: Path) -> None:
    overall = summary.get("overall", {})
    typer.echo(json.dumps(_headline(overall), indent=2))
    typer.echo(f"results: {out / 'samples.jsonl'}  summary: {out / SUMMARY_FILE}")
    if (out / "report.md").exists():
        typer.echo(f"report: {out / 'report.md'}")


def _headline(overall: dict) -> dict:
    keys = ("n_items", "acc_tool", "acc_notool", "te", "mode_adaptiveness", "gain", "harm")
    flat = {**overall, **overall.get("adaptivity", {})}
    return {k: flat[k] for k in keys if k in flat}
