"""The one engine registry: every way to build an engine goes through it.

Each engine registers a constructor (``model, **kwargs -> Engine``) and a function that turns an
:class:`~beacon.engines.config.EngineConfig` into those keyword arguments. Two entry points use
the same table:

- ``build_engine(cfg)``: what `beacon eval`, `beacon run` and the training recipes call;
- ``load_engine(name, model, **kwargs)``: for code that has no config (`beacon serve`, tests).

Constructors import their heavy libraries (torch, vLLM, aiohttp) only when called, so importing
`beacon.engines` stays cheap and works without vLLM. Adding an engine is one ``register_engine``
call; nothing else names engines.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beacon.engines.base import DEFAULT_CONCURRENCY, Engine
from beacon.engines.tiny import cached_tiny_model
from beacon.engines.tokenizer import HFTokenizer
from beacon.engines.vllm import VLLMEngine
from beacon.errors import UserError

if TYPE_CHECKING:  # the config validates names against this registry, so no import back
    from beacon.engines.config import EngineConfig

TINY_MODEL = "tiny"  # model name meaning "the built-in tiny Qwen2-VL, built locally on first use"


@dataclass(frozen=True)
class EngineEntry:
    """How to build one engine: its constructor and its keyword arguments from a config."""

    construct: Callable[..., Engine]
    options: Callable[[EngineConfig], dict[str, Any]]


_REGISTRY: dict[str, EngineEntry] = {}


def register_engine(
    name: str, construct: Callable[..., Engine], options: Callable[[EngineConfig], dict[str, Any]]
) -> None:
    """Make engine ``name`` buildable by `build_engine` and `load_engine`."""
    _REGISTRY[name] = EngineEntry(construct, options)


def engine_names() -> list[str]:
    """Registered engine names, in registration order."""
    return list(_REGISTRY)


def load_engine(name: str, model: str, **kwargs: Any) -> Engine:
    """Build engine ``name`` for ``model`` (a checkpoint path, or the served name for openai).

    Keyword arguments go to the engine's constructor (e.g. device, batch_size, base_url).
    """
    entry = _REGISTRY.get(name)
    if entry is None:
        raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(_REGISTRY)}")
    return entry.construct(model, **kwargs)


def build_engine(cfg: EngineConfig, api_key: str | None = None) -> Engine:
    """The configured engine; model "tiny" is the built-in tiny Qwen2-VL (built on first use).

    `api_key` is a server's key given on the command line (`--api-key`); it wins over the
    variable `engine.api_key_env` names. Keys are arguments, never settings, so that no
    config.yaml holds one.
    """
    model = cfg.model
    check_model(cfg)
    check_api_key(cfg, api_key)
    if model == TINY_MODEL:
        model = str(cached_tiny_model("qwen2_vl"))
    options = _REGISTRY[cfg.name].options(cfg)
    if api_key is not None:
        options["api_key"] = api_key
    return load_engine(cfg.name, model, **options)


def key_from_env(env: str | None, required_by: str | None = None) -> str | None:
    """The API key in environment variable `env` (`engine.api_key_env`, `judge.api_key_env`);
    None when `env` is None or the variable is unset or empty (the server then gets no key).

    `required_by` names the setting that named `env` where a key is opted into (a trainer's
    servers, OPD's teacher server and critic: none by default): there an unset variable is an
    error when the run starts, since every request would be refused with 401 (a refused critic
    would quietly turn ReVuE into vanilla OPD)."""
    key = (os.environ.get(env) or None) if env else None
    if key is None and env and required_by:
        raise UserError(
            f"{required_by}={env!r} but ${env} is not set; export it with the key the server was "
            "started with (its --api-key), or unset that setting for a server without a key"
        )
    return key


def check_api_key(cfg: EngineConfig, api_key: str | None) -> None:
    """Refuse a key for an engine that reaches no server (it would be dropped unseen)."""
    if api_key is not None and cfg.name != "openai":
        raise UserError(
            f"--api-key is for a server (engine.name=openai), but engine.name={cfg.name} runs "
            "the model in this process; drop --api-key, or set --engine openai with --base-url"
        )


def check_model(cfg: EngineConfig) -> None:
    """Refuse, in a second and before loading anything, a model that cannot be loaded: a local
    path that does not exist (transformers would try the hub with it), or a hub id that is not
    cached while the hub is out of reach (else: minutes of retries, then a long trace)."""
    model = cfg.model
    if cfg.name == "openai" or model == TINY_MODEL:
        return  # the served name is the server's business
    if model.startswith(("/", "./", "../", "~")) or Path(model).expanduser().exists():
        if not Path(model).expanduser().exists():
            raise UserError(
                f"engine.model={model}: no such folder; give a checkpoint folder, a hub id "
                f'(org/name), or "{TINY_MODEL}" for the built-in tiny model'
            )
        return
    if _cached_snapshot(model) is None and not _hub_reachable():
        raise UserError(
            f"engine.model={model}: not in the local Hugging Face cache, and the hub cannot be "
            "reached (offline, or HF_HUB_OFFLINE=1); download it on a connected machine, or "
            f"give a local checkpoint folder with --model /path, or --model {TINY_MODEL}"
        )


def _local_tokenizer_source(model: str) -> str | None:
    """The served model's processor, when its name is a local folder or a cached hub id.

    Without it the openai engine has no token ids (docs/engines.md: text-only). Never downloads.
    """
    path = Path(model).expanduser()
    if path.is_dir():
        return str(path)
    if model.count("/") == 1 and not model.startswith((".", "/")):
        return _cached_snapshot(model)
    return None


def _cached_snapshot(repo_id: str) -> str | None:
    """The local folder of a cached hub model, or None (not cached, or not a repo id)."""
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(repo_id, local_files_only=True)
    except Exception:  # LocalEntryNotFoundError, or an id the hub would reject anyway
        return None


def _hub_reachable(timeout_s: float = 3.0) -> bool:
    """False when offline is requested (HF_HUB_OFFLINE) or the hub's host cannot be connected."""
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    url = urlparse(constants.ENDPOINT)
    try:
        with socket.create_connection((url.hostname, url.port or 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def resolve_device(name: str) -> str:
    """``"auto"`` picks the GPU when there is one."""
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _hf(model: str, **kwargs: Any) -> Engine:
    # lazy: torch and transformers load only for an hf engine
    from beacon.engines.hf import HFEngine

    return HFEngine(model, **kwargs)


def _vllm(model: str, **kwargs: Any) -> Engine:
    return VLLMEngine(model, **kwargs)


def _openai(model: str, **kwargs: Any) -> Engine:
    # lazy: aiohttp loads only for an openai engine
    from beacon.engines.openai import OpenAIEngine

    if "base_url" not in kwargs:
        raise ValueError(
            "the openai engine needs base_url, e.g. "
            "load_engine('openai', 'my-model', base_url='http://localhost:8000/v1')"
        )
    return OpenAIEngine(model=model, **kwargs)


def _openai_options(cfg: EngineConfig) -> dict[str, Any]:
    tokenizer = None
    source = cfg.tokenizer or _local_tokenizer_source(cfg.model)
    if source:
        tokenizer = HFTokenizer.from_pretrained(source)
    return {
        "base_url": cfg.base_url,
        "api_key": key_from_env(cfg.api_key_env),
        "vllm_extensions": cfg.vllm_extensions,
        "tokenizer": tokenizer,
        "concurrency": cfg.concurrency or DEFAULT_CONCURRENCY,
        "timeout_s": cfg.timeout_s,
        "max_retries": cfg.max_retries,
    }


register_engine(
    "hf", _hf, lambda cfg: {"device": resolve_device(cfg.device), "batch_size": cfg.batch_size}
)
register_engine("vllm", _vllm, lambda cfg: {})
register_engine("openai", _openai, _openai_options)
