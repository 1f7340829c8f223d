"""The weights a rollout engine serves for a model trained with LoRA: the base model's names,
each adapted linear's weight merged (W + scale x B A), computed beside the trained model (which
keeps training its adapters, unmerged).

An engine (in-process `hf` or `beacon serve`) loads the base checkpoint, so it takes the merged
weights under the base names; peft's own `merge_and_unload` would change the trained module
(or need a full copy of the model), `served_state_dict` needs one merged tensor per adapted
linear at a time beside the state dict's views.
"""

from __future__ import annotations

from typing import Any

import torch

ADAPTER_MARK = ".lora_"
"""Part of every state-dict name peft gives an adapter's tensors (lora_A, lora_B, ...)."""
BASE_LAYER = ".base_layer."
"""Part of the name peft gives a wrapped layer's own weight and bias."""


def served_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """`model.state_dict()`, or for a peft model the base model's state dict under its own
    names with every active adapter merged into its layer's weight (detached)."""
    if not hasattr(model, "peft_config"):
        return model.state_dict()
    base = model.get_base_model()
    deltas = {}
    with torch.no_grad():
        for name, module in base.named_modules():
            if hasattr(module, "get_delta_weight") and hasattr(module, "base_layer"):
                adapters = [a for a in module.active_adapters if a in module.lora_A]
                if adapters:
                    deltas[f"{name}.weight"] = sum(module.get_delta_weight(a) for a in adapters)
        out = {}
        for key, tensor in base.state_dict().items():
            if ADAPTER_MARK in key:
                continue
            name = key.replace(BASE_LAYER, ".")
            out[name] = tensor + deltas[name].to(tensor.dtype) if name in deltas else tensor
    return out
