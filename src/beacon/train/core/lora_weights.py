"""The weights a rollout engine loads from a LoRA policy: each adapted layer's base weight plus
its adapter's update, under the base model's own parameter names.

Computed beside the training model, never in it. peft's `merge_adapter()` then
`unmerge_adapter()` would add the update into the frozen base weight and subtract it again, which
leaves float error in weights that must not change (a resumed run would drift from an
uninterrupted one); `merge_and_unload()` on a copy holds the model twice each step. Here only the
adapted layers' merged weights are new tensors.

What is not covered: adapters on embeddings or convolutions (Beacon targets linear layers,
`model.lora.target_modules`), `modules_to_save`, and several adapters active at once beyond
summing their updates.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def is_peft_model(model: Any) -> bool:
    """Whether `model` is a peft model (False where peft is not installed)."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def rollout_state_dict(model: Any) -> dict[str, Tensor]:
    """The state dict a rollout engine loads (`HFEngine.load_weights`, a weight push).

    A plain model gives its own state dict. A peft model gives its base model's parameter names
    with W + (alpha / r) B A in each adapted linear layer, and no adapter tensors, so the
    result loads into the checkpoint the run started from.
    """
    if not is_peft_model(model):
        return model.state_dict()
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    updates: dict[str, Tensor] = {}
    with torch.no_grad():
        for name, module in base.named_modules():
            if isinstance(module, LoraLayer) and not module.merged:
                active = [a for a in module.active_adapters if a in module.lora_A]
                if active:
                    updates[f"{name}.weight"] = sum(module.get_delta_weight(a) for a in active)
        merged: dict[str, Tensor] = {}
        for key, value in base.state_dict().items():
            if ".lora_" in key:
                continue
            name = key.replace(".base_layer.", ".")
            merged[name] = value + updates[name].to(value.dtype) if name in updates else value
    return merged
