"""`beacon serve` as `servers.Server` starts it, over an hf engine that samples through the tests'
scripted-choice processor: the same app (`create_app`) and settings, the engine built by the
test. Takes the arguments `servers.Server` passes (`serve --model M --port P ...`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from grpo_helpers import choice_processors

if __name__ == "__main__":
    import uvicorn

    from beacon.engines.hf import HFEngine
    from beacon.engines.serve import create_app
    from beacon.engines.serve_guard import API_KEY_ENV, ServeSettings
    from beacon.engines.tokenizer import HFTokenizer

    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("--model", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--allow-weight-updates", action="store_true")
    args = parser.parse_args()
    tokenizer = HFTokenizer.from_pretrained(args.model)
    engine = HFEngine(
        args.model,
        batch_size=args.batch_size,
        tokenizer=tokenizer,
        logits_processors=choice_processors(tokenizer),
    )
    settings = ServeSettings(
        api_key=os.environ.get(API_KEY_ENV), allow_weight_updates=args.allow_weight_updates
    )
    app = create_app(engine, args.served_model_name, settings, max_batch=args.batch_size)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
