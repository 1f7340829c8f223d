"""One SFT forward-backward on step 0's global batch; the main process saves loss and grads.

Run directly (1 process) or under `accelerate launch --cpu --num_processes 2` (gloo DDP) by
`test_ddp.py`; argv: the SFT config as JSON, the output file.
"""

from __future__ import annotations

import json
import sys

import torch

from beacon.train.core.setup import make_accelerator
from beacon.train.core.train_loop import forward_backward, my_share, step_indices
from beacon.train.sft import SFTConfig
from beacon.train.sft.recipe import build_parts, make_plan


def first_step(cfg: SFTConfig, out: str) -> None:
    """Forward-backward of step 0 under the current launcher; the main process saves to `out`."""
    accelerator = make_accelerator(cfg.model, cfg.train)
    parts, data = build_parts(cfg, accelerator)
    indices = step_indices(0, cfg.train.global_batch_size, len(data.rows), cfg.train.seed)
    batches = make_plan(data, cfg)(my_share(indices, accelerator))
    result = forward_backward(accelerator, parts.model, batches)
    if accelerator.is_main_process:
        model = accelerator.unwrap_model(parts.model)
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        saved = {"loss": result.loss, "targets": result.targets, "grads": grads}
        torch.save({**saved, "processes": accelerator.num_processes}, out)
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    first_step(SFTConfig.model_validate(json.loads(sys.argv[1])), sys.argv[2])
