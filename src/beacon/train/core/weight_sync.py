"""The rollout engine of `beacon train grpo` and `beacon train opd`, and how new weights reach it.

`rollout_engine` builds the in-process `hf` engine (weights copied in with `load_weights`), or,
with `rollout.servers`, one `openai` engine per `beacon serve` process behind a
`beacon.engines.spread.SpreadEngine`, new weights pushed to every server with
`beacon.engines.weights.push_weights` and the servers' API key (`rollout.server_api_key_env`),
cast to each server's dtypes and in bodies of at most `rollout.push_chunk_mb` of tensors; each
server checks a push whole before it applies any of it.

`WeightSync` pushes the trainer's weights (`trainer_weights`: whole tensors, also where the
launch shards them) into the engine: every process into its own in-process engine, or the main
process alone into the servers all processes share, the others waiting until it is done so no
process rolls out on a server that is still being written.

What is not covered: vLLM servers (they need vLLM's own weight-update path); DeepSpeed ZeRO-3
gathering is written after TRL's and has not run (DeepSpeed is not installed in the tests).

LoRA (`rollout_state_dict`): the weights a rollout engine loads from a LoRA policy: each adapted
layer's base weight plus its adapter's update, under the base model's own parameter names.

Computed beside the training model, never in it. peft's `merge_adapter()` then
`unmerge_adapter()` would add the update into the frozen base weight and subtract it again, which
leaves float error in weights that must not change (a resumed run would drift from an
uninterrupted one); `merge_and_unload()` on a copy holds the model twice each step. Here only the
adapted layers' merged weights are new tensors.

The merge reads tensors from a state dict (the unwrapped model's, or the whole tensors a sharded
launch gathered: `trainer_weights`) and only the adapters' names and scales from the
modules, so it works on any launch.

What is not covered: adapters on embeddings or convolutions, DoRA and `fan_in_fan_out` layers
(Beacon targets plain linear layers, `model.lora.target_modules`), `modules_to_save`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from beacon.engines.hf import HFEngine
from beacon.engines.openai import OpenAIEngine
from beacon.engines.registry import key_from_env
from beacon.engines.spread import SpreadEngine
from beacon.engines.tokenizer import HFTokenizer
from beacon.engines.weights import push_weights
from beacon.train.core.config import ServedRolloutConfig

if TYPE_CHECKING:
    from beacon.engines.hf import LogitsProcessorFactory


Push = Callable[[Mapping[str, torch.Tensor]], None]
"""Puts a state dict (whole tensors, the engine's parameter names) into the rollout engine."""


@dataclass
class WeightSync:
    """The engine rollouts run on, how weights reach it, and whether all processes share it
    (servers: the main process pushes) or each has its own (in-process: each pushes)."""

    engine: Any
    push: Push
    shared: bool

    def __call__(self, accelerator: Any, model: torch.nn.Module) -> None:
        """Push the current weights of `model` (as `accelerator.prepare` returned it); a
        collective call: every process calls it after every optimizer step."""
        weights = trainer_weights(accelerator, model)
        if not self.shared or accelerator.is_main_process:
            self.push(weights)
        if self.shared:
            accelerator.wait_for_everyone()


def rollout_engine(
    model_path: str,
    rollout: ServedRolloutConfig,
    device: str,
    batch_size: int,
    tokenizer: Any = None,
    logits_processors: LogitsProcessorFactory | None = None,
) -> WeightSync:
    """The engine rollouts run on (in-process `hf` of `model_path`, or the servers of
    `rollout.servers`), and how new weights reach it; `tokenizer` is the run's handle of
    `model_path`'s tokenizer and processor (loaded here when None).

    `logits_processors` builds the in-process engine's processors from the tokenizer (tests
    steer the tiny model with `beacon.fakes.logits`); servers sample with their own, so it is
    refused with `rollout.servers`."""
    tokenizer = tokenizer or HFTokenizer.from_pretrained(model_path)
    if not rollout.servers:
        processors = logits_processors(tokenizer) if logits_processors else None
        engine = HFEngine(
            model_path,
            device=device,
            batch_size=batch_size,
            tokenizer=tokenizer,
            logits_processors=processors,
        )
        return WeightSync(engine, engine.load_weights, shared=False)
    if logits_processors is not None:
        raise ValueError(
            "logits_processors apply to the in-process engine, but rollout.servers is set: each "
            "`beacon serve` process samples with its own engine; give the processors to those"
        )

    key = key_from_env(rollout.server_api_key_env, required_by="rollout.server_api_key_env")
    engines = [
        OpenAIEngine(
            base_url=url,
            model=rollout.server_model,
            api_key=key,
            tokenizer=tokenizer,
            concurrency=rollout.concurrency,
            timeout_s=rollout.server_timeout_s,
            vllm_extensions="on",  # training needs token ids: a server refusing them is an error
        )
        for url in rollout.servers
    ]
    servers, timeout = rollout.servers, rollout.server_timeout_s
    chunk_bytes = rollout.push_chunk_mb << 20
    return WeightSync(
        SpreadEngine(engines),
        lambda sd: push_weights(servers, sd, timeout, key, chunk_bytes),
        shared=True,
    )


def trainer_weights(accelerator: Any, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole weights of the prepared `model` on this process, as the rollout engine names
    them: FSDP2 gathers its shards (every process gets every tensor), DeepSpeed ZeRO-3 gathers
    its partitions for the copy, otherwise the unwrapped model's own `state_dict`; with LoRA,
    the adapters merged into their base weights (`rollout_state_dict`)."""
    unwrapped = accelerator.unwrap_model(model)
    if accelerator.is_fsdp2:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        whole = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
        return rollout_state_dict(unwrapped, whole)
    plugin = accelerator.state.deepspeed_plugin
    if plugin is not None and plugin.zero_stage == 3:
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(model.parameters())):
            whole = {k: v.detach().clone() for k, v in unwrapped.state_dict().items()}
        return rollout_state_dict(unwrapped, whole)
    return rollout_state_dict(unwrapped)


_PEFT_PREFIX = "base_model.model."


def is_peft_model(model: Any) -> bool:
    """Whether `model` is a peft model (False where peft is not installed)."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def rollout_state_dict(
    model: Any, state_dict: Mapping[str, Tensor] | None = None
) -> dict[str, Tensor]:
    """The state dict a rollout engine loads (`HFEngine.load_weights`, a weight push).

    `state_dict` holds `model`'s whole tensors by its own names (default: `model.state_dict()`).
    A plain model gives it back as it is. A peft model gives its base model's parameter names
    with W + (alpha / r) B A in each adapted linear layer and no adapter tensors, so the result
    loads into the checkpoint the run started from.
    """
    weights = dict(model.state_dict() if state_dict is None else state_dict)
    if not is_peft_model(model):
        return weights
    from peft.tuners.lora import LoraLayer

    updates: dict[str, Tensor] = {}
    with torch.no_grad():
        for name, module in model.named_modules():
            if not isinstance(module, LoraLayer) or module.merged:
                continue
            for adapter in module.active_adapters:
                if adapter not in module.lora_A:
                    continue
                a = weights[f"{name}.lora_A.{adapter}.weight"]
                b = weights[f"{name}.lora_B.{adapter}.weight"]
                delta = (b @ a) * module.scaling[adapter]
                key = f"{name}.base_layer.weight"
                updates[key] = updates[key] + delta if key in updates else delta
        merged: dict[str, Tensor] = {}
        for key, value in weights.items():
            if ".lora_" in key:
                continue
            if key in updates:
                value = value + updates[key].to(value.dtype)
            merged[key.removeprefix(_PEFT_PREFIX).replace(".base_layer.", ".")] = value
    return merged
