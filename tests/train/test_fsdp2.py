"""The SFT, GRPO and OPD step code under FSDP2 on 2 CPU processes (gloo) gives the gradients of
the unsharded one-process run, and the weights a rollout push sends are whole.

accelerate 1.16 cannot run FSDP on CPU processes: `AcceleratorState` sets `DistributedType.FSDP`
only inside its branch for accelerator devices (MULTI_GPU, MULTI_NPU, ...: accelerate/state.py
947-974), and `Accelerator(cpu=True)` under a 2-process launch is MULTI_CPU (state.py 760-769),
which prepares a DDP wrapper even with an FSDP2 plugin. So the worker shards the model with
torch's `fully_shard` as accelerate's FSDP2 plugin does and runs the trainers' own step code
(`fsdp2_worker.py`); the recipes under accelerate + FSDP2 run in benchmarks/gpu_real_size.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from .helpers import run_worker
from .servers import free_port

WORKER = Path(__file__).with_name("fsdp2_worker.py")


@pytest.mark.slow
def test_sft_grpo_and_opd_steps_under_fsdp2_equal_one_process(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    run_worker([sys.executable, str(WORKER), str(tiny_model_path), str(tmp_path)], tmp_path)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    torchrun += ["--master_port", str(free_port())]
    run_worker([*torchrun, str(WORKER), str(tiny_model_path), str(tmp_path)], tmp_path)
    one, two = (torch.load(tmp_path / f"step-{n}.pt") for n in (1, 2))
    assert (one["processes"], two["processes"]) == (1, 2)
    for part in ("sft", "grpo", "opd", "weights"):
        assert one[part].keys() == two[part].keys() and len(one[part]) > 50, part
        for name, tensor in one[part].items():
            # float32 sums in another order (per shard, then reduce-scattered): ~3e-6 measured
            torch.testing.assert_close(
                two[part][name], tensor, rtol=1e-4, atol=1e-6, msg=f"{part} {name}"
            )
