"""The weights a rollout engine loads from a LoRA policy: each adapted layer's base weight plus
its adapter's update, under the base model's own parameter names.

Computed beside the training model, never in it. peft's `merge_adapter()` then
`unmerge_adapter()` would add the update into the frozen base weight and subtract it again, which
leaves float error in weights that must not change (a resumed run would drift from an
uninterrupted one); `merge_and_unload()` on a copy holds the model twice each step. Here only the
adapted layers' merged weights are new tensors.

The merge reads tensors from a state dict (the unwrapped model's, or the whole tensors a sharded
launch gathered: `weight_sync.trainer_weights`) and only the adapters' names and scales from the
modules, so it works on any launch.

What is not covered: adapters on embeddings or convolutions, DoRA and `fan_in_fan_out` layers
(Beacon targets plain linear layers, `model.lora.target_modules`), `modules_to_save`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

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
