"""Two CPU processes (gloo DDP through `accelerate launch`) give the loss and gradients of one
process on the same global batch: the loss is normalised by the step's global target count."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from beacon.train.sft import SFTConfig

from .ddp_worker import first_step
from .helpers import run_worker, sft_settings

WORKER = Path(__file__).with_name("ddp_worker.py")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("accelerate") is None, reason="accelerate CLI not installed")
def test_two_gloo_processes_equal_one(
    tiny_model_path: Path, train_data: Path, tmp_path: Path
) -> None:
    # 6 rows of uneven lengths: each process gets 3 and cuts them into different micro-batches
    settings = sft_settings(
        tiny_model_path,
        train_data,
        tmp_path / "run",
        global_batch_size=6,
        max_tokens_per_microbatch=300,
    )
    config = json.dumps(settings)
    one, two = tmp_path / "one.pt", tmp_path / "two.pt"
    first_step(SFTConfig.model_validate(settings), str(one))  # one process, in this one
    # --multi_gpu is accelerate's torchrun launcher; on a machine without CUDA the recipe's
    # Accelerator(cpu=True) joins the two processes into a gloo group (--cpu would start one)
    launch = [shutil.which("accelerate"), "launch", "--multi_gpu", "--num_processes", "2"]
    launch += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    run_worker([*launch, str(WORKER), config, str(two)], tmp_path)
    a, b = torch.load(one), torch.load(two)
    assert (a["processes"], b["processes"]) == (1, 2)
    assert a["targets"] == b["targets"] > 0
    assert b["loss"] == pytest.approx(a["loss"], rel=1e-6)
    assert a["grads"].keys() == b["grads"].keys()
    for name, grad in a["grads"].items():
        # float32 sums in another order (per process, then all-reduced): 1e-5 relative
        torch.testing.assert_close(b["grads"][name], grad, rtol=1e-4, atol=1e-6, msg=name)
