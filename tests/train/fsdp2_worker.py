"""The gradients of one SFT, GRPO and OPD step of the tiny model on fixed trajectories, through the
trainers' own step code (`loop.forward_backward`, `grpo.policy.policy_update`, OPD's
`SequenceScorer.student_scores` with `loop.accumulate` / `loop.backward`), then one SGD step and
the weights `setup.trainer_weights` would push.

Under `torchrun --nproc_per_node 2` the model is FSDP2-sharded over gloo (`fully_shard` of each
decoder layer, then the root, as accelerate's FSDP2 plugin wraps it) and the processes get
uneven shares, so `loop.accumulate` runs placeholders; alone it is the unsharded reference.
accelerate itself refuses FSDP on CPU processes (its `AcceleratorState` picks FSDP only for an
accelerator device), so `Sharded` stands in for the few `Accelerator` calls the step code makes,
each as accelerate 1.16 does it for FSDP2. The main process saves everything to argv[2].
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist

from beacon.engines.tokenizer import HFTokenizer
from beacon.fakes.trajectories import scripted_trajectory
from beacon.images import ImageStore
from beacon.train.core import train_loop as loop
from beacon.train.core.collate import PixelCache, collate
from beacon.train.core.config import ModelConfig
from beacon.train.core.encode import encode_trajectory
from beacon.train.core.setup import load_model, trainer_weights
from beacon.train.grpo.config import LossConfig
from beacon.train.grpo.policy import StepTotals, policy_rows, policy_update
from beacon.train.opd.revue_loss import topk_reverse_kl, trajectory_loss
from beacon.train.opd.score import SequenceScorer, supervised_positions

ROWS = 6
OPD_ROWS = 5  # 3 + 2 over two processes: uneven
K = 4


class Sharded:
    """What the step code calls of an `Accelerator`, as accelerate does it for FSDP2 (or for
    one process without a launch when `world` is 1)."""

    device = torch.device("cpu")
    state = SimpleNamespace(deepspeed_plugin=None)

    def __init__(self, world: int, rank: int) -> None:
        self.num_processes, self.process_index = world, rank
        self.is_fsdp2 = world > 1
        self.is_main_process = rank == 0

    def reduce(self, tensor: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        if self.num_processes > 1:
            op = dist.ReduceOp.MAX if reduction == "max" else dist.ReduceOp.SUM
            dist.all_reduce(tensor, op=op)
        return tensor

    @contextlib.contextmanager
    def no_sync(self, model: Any) -> Iterator[None]:
        if not self.is_fsdp2:
            yield
            return
        model.set_requires_gradient_sync(False)  # accelerate/accelerator.py, `no_sync`
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def unwrap_model(self, model: Any) -> Any:
        return model


def gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every gradient, whole (a collective under FSDP2), then cleared."""
    out = {}
    for name, param in model.named_parameters():
        grad = param.grad
        if grad is not None:
            out[name] = (grad.full_tensor() if hasattr(grad, "full_tensor") else grad).clone()
        param.grad = None
    return out


def main(model_path: str, out: Path) -> None:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    tokenizer = HFTokenizer.from_pretrained(model_path)
    store = ImageStore(out / f"images-{rank}")
    trajs = [
        scripted_trajectory(tokenizer, store, s, tool_calls=s % 3, filler_words=2 * s)
        for s in range(ROWS)
    ]
    encoded = [encode_trajectory(t, tokenizer) for t in trajs]
    pixels = PixelCache(tokenizer.processor.image_processor, store.get)

    def col(rows: list) -> Any:
        return collate(rows, tokenizer.pad_token_id, tokenizer.image_token_id, pixels)

    model = load_model(ModelConfig(path=model_path))
    if world > 1:
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.language_model.layers:
            fully_shard(layer)
        fully_shard(model)
    acc = Sharded(world, rank)
    mine = loop.my_share(range(ROWS), acc)
    saved: dict[str, Any] = {"processes": world}

    # SFT: rank 0 one row per micro-batch, rank 1 all its rows in one
    plan = [[i] for i in mine] if rank == 0 else [mine]
    loop.forward_backward(acc, model, [col([encoded[i] for i in b]) for b in plan])
    saved["sft"] = gradients(model)

    # GRPO: rank 0 every row alone (no micro-batch cost), rank 1 packed into one
    advantages = [(-1.0) ** i * (1 + i / 10) for i in mine]
    rows = policy_rows([trajs[i] for i in mine], advantages, tokenizer)
    totals = StepTotals(ROWS, sum(e.num_loss_tokens for e in encoded))
    cost = 0 if rank == 0 or world == 1 else 10**6
    policy_update(acc, model, rows, {}, col, LossConfig(), 100_000, cost, totals)
    saved["grpo"] = gradients(model)

    # OPD: the student's logits on a fixed random support against fixed random targets
    work = loop.my_share(range(OPD_ROWS), acc)
    scorer = SequenceScorer(model, tokenizer, pixels, inner=acc.unwrap_model(model))
    for n in loop.accumulate(acc, model, len(work)):
        i = work[min(n, len(work) - 1)]
        generator = torch.Generator().manual_seed(i)
        positions = supervised_positions(encoded[i]).numel()
        vocab = model.config.text_config.vocab_size
        support = torch.randint(0, vocab, (positions, K), generator=generator)
        target = torch.randn((positions, K), generator=generator).log_softmax(-1)
        student = scorer.student_scores(encoded[i], support, chunk_size=4)
        kl = topk_reverse_kl(student.support_logits, target)
        loss = trajectory_loss(kl, torch.ones(positions))
        loop.backward(acc, loss * (n < len(work)) / OPD_ROWS)  # a placeholder: weight 0
    torch.optim.SGD(model.parameters(), lr=1.0).step()
    saved["opd"] = gradients(model)
    saved["weights"] = {k: v.clone() for k, v in trainer_weights(acc, model).items()}
    if rank == 0:
        torch.save(saved, out / f"step-{world}.pt")
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
