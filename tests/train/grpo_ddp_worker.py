"""`run_grpo` of the JSON config in argv[1] with the tests' scripted-choice sampler; run under
`accelerate launch --cpu --num_processes 2` by `test_grpo_ddp.py`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from grpo_helpers import choice_processors

if __name__ == "__main__":
    from beacon.train.grpo import run_grpo
    from beacon.train.grpo.config import GRPOConfig

    run_grpo(
        GRPOConfig.model_validate(json.loads(sys.argv[1])), logits_processors=choice_processors
    )
