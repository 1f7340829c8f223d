"""One recipe run of `gpu_real_size.py`'s FSDP2 section: `beacon train sft|grpo|opd` on the config
in argv[2] (JSON), resumed from its newest checkpoint when argv[3] is "resume". The section runs
it under `accelerate launch --config_file fsdp.yaml --num_processes 1` (`beacon configs cp fsdp .`)
(FSDP2, SHARDED_STATE_DICT) on a GPU, or plainly on CPU, where accelerate has no FSDP.

GRPO's and OPD's rollout engines sample through `synth_choices` (answer one of the items'
answers, or crop), as `grpo_step.py` does: a random model's own samples give GRPO equal rewards
(no gradient) and, at the real vocabulary, ids the tiny tokenizer cannot decode.

It writes `launch-<fresh|resume>.json` into the run folder: the distributed type and FSDP
version the recipe's `Accelerator` ran with, and the peak GPU memory.

    accelerate launch --config_file fsdp.yaml --num_processes 1 \\
        benchmarks/sharded_steps.py opd '{"model": ...}' [resume]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def run(recipe: str, raw: dict[str, Any], resume: bool) -> None:
    import torch

    from beacon.train.core import setup

    made: list[Any] = []
    make = setup.make_accelerator

    def recorded(*args: Any, **kwargs: Any) -> Any:
        made.append(make(*args, **kwargs))
        return made[-1]

    setup.make_accelerator = recorded  # open_run looks it up at call time
    if recipe == "sft":
        from beacon.train.sft import SFTConfig, run_sft

        run_sft(SFTConfig.model_validate(raw), resume=resume)
    elif recipe == "grpo":
        from beacon.train.grpo import run_grpo
        from beacon.train.grpo.config import GRPOConfig

        run_grpo(GRPOConfig.model_validate(raw), resume, choose_answers(raw))
    else:
        from beacon.train.opd import OPDConfig, run_opd

        run_opd(OPDConfig.model_validate(raw), resume, choose_answers(raw))
    acc = made[0]
    plugin = getattr(acc.state, "fsdp_plugin", None)
    info = {
        "distributed_type": str(acc.distributed_type),
        "fsdp_version": getattr(plugin, "fsdp_version", None),
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0,
    }
    if acc.is_main_process:
        name = "launch-resume.json" if resume else "launch-fresh.json"
        (Path(raw["train"]["output_dir"]) / name).write_text(json.dumps(info))


def choose_answers(raw: dict[str, Any]) -> Callable[[Any], list[Any]]:
    """The rollout engine's logits processors: `synth_choices` over the answers of the run's
    synth items."""
    from beacon.benchmarks import get_benchmark
    from beacon.fakes.logits import synth_choices

    data = raw.get("data", {})  # OPD's items; GRPO's are rollout.limit / data_seed
    limit = data.get("limit", raw["rollout"].get("limit"))
    seed = data.get("seed", raw["rollout"].get("data_seed", 0))
    answers = sorted({s.answer for s in get_benchmark("synth").load(limit=limit, seed=seed)})
    return lambda tokenizer: [synth_choices(tokenizer, answers)]


if __name__ == "__main__":
    run(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:] == ["resume"])
