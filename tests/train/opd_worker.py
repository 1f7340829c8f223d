"""`run_opd` of the JSON config in argv[1] (resumed when argv[2] is "resume"); run under
`accelerate launch --cpu --num_processes 2` (or alone) by `test_opd_ddp.py`."""

from __future__ import annotations

import json
import sys

if __name__ == "__main__":
    from beacon.train.opd import OPDConfig, run_opd

    resume = sys.argv[2:] == ["resume"]
    run_opd(OPDConfig.model_validate(json.loads(sys.argv[1])), resume=resume)
