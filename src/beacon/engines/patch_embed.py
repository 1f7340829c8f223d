"""Vision patch embeddings as one matrix product instead of a 3-D convolution.

Qwen2-VL, Qwen2.5-VL and Qwen3-VL embed each 2x14x14 pixel patch with an `nn.Conv3d` whose stride
equals its kernel, and feed it a tensor holding exactly one kernel-sized block per patch: every
output is one dot product of a flattened patch with a flattened filter, so the convolution is
`patches.flatten(1) @ weight.flatten(1).T`. PyTorch's CPU convolution does not see this: in an
SFT step of the demo model (`beacon.demo.model`, 32 trajectories, 1 torch thread) the patch
embedding's forward and backward take 14.4 ms as a `linear` against 85.5 as the convolution,
and the step 331 ms against 411 (`benchmarks/patch_embed.py`, docs/engines.md). SGLang and
transformers' opt-in `fusion_config={"patch_embeddings": True}` make the same change
(docs/engines.md says why Beacon does not use the latter).

`linear_patch_embeddings(model)` switches such modules to `PatchConv3d` in place: still an
`nn.Conv3d` with the same parameters, so state dicts, checkpoints, LoRA targeting and
`save_pretrained` are unchanged; any input that is not one kernel per sample (or a module with
padding, dilation or groups) goes through the ordinary convolution. The results equal the
convolution's up to float summation order (~1e-6 relative at the demo's sizes).

The matrix product runs only on CPU tensors, where it was measured; on an accelerator the
module runs the stock convolution (no GPU measurement backs the trick there). With
`BEACON_LINEAR_PATCH_EMBED=0` in the environment every model keeps its convolution as loaded.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

SWITCH = "BEACON_LINEAR_PATCH_EMBED"
"""The environment variable that turns the trick off with "0" (docs/engines.md)."""


class PatchConv3d(nn.Conv3d):
    """An `nn.Conv3d` whose stride is its kernel, computed as a matrix product when each input
    sample is exactly one kernel (the output is then 1x1x1 per sample) on the CPU."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """`F.linear` over flattened patches when each sample is exactly one kernel (the vision
        tower's case) and the tensor is on the CPU, else the ordinary convolution."""
        if (
            input.device.type != "cpu"
            or input.dim() != 5
            or tuple(input.shape[2:]) != tuple(self.kernel_size)
        ):
            return super().forward(input)
        n = input.shape[0]
        out = F.linear(input.reshape(n, -1), self.weight.reshape(self.out_channels, -1), self.bias)
        return out.view(n, self.out_channels, 1, 1, 1)


def _is_patch_conv(module: nn.Module) -> bool:
    return (
        type(module) is nn.Conv3d
        and tuple(module.stride) == tuple(module.kernel_size)
        and module.groups == 1
        and all(p == 0 for p in module.padding)
        and all(d == 1 for d in module.dilation)
    )


def linear_patch_embeddings(model: nn.Module) -> int:
    """Switch every patch-embedding `nn.Conv3d` of `model` (stride == kernel, no padding,
    dilation or groups) to `PatchConv3d`; returns how many were switched (none with `SWITCH`
    set to "0")."""
    if os.environ.get(SWITCH, "1") == "0":
        return 0
    switched = 0
    for module in model.modules():
        if _is_patch_conv(module):
            module.__class__ = PatchConv3d
            switched += 1
    return switched
