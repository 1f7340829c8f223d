"""Engine failures are not results (issue 8): an eval against an unreachable server records no
sample, says so and fails; rerun against the started server, every sample is answered by the
model and the accuracy is over all of them."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from beacon.config import load_config
from beacon.engines.hf import HFEngine
from beacon.engines.serve import serve_in_thread
from beacon.eval.config import EvalConfig
from beacon.eval.records import ERRORS_FILE, SAMPLES_FILE
from beacon.eval.runner import InfrastructureErrors, run_eval
from beacon.jsonl import read_jsonl

LIMIT = 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_server_then_started_server(tmp_path: Path, tiny_model_path: Path) -> None:
    port = free_port()
    out = tmp_path / "run"
    cfg = load_config(
        EvalConfig,
        overrides=[
            "engine.name=openai",
            "engine.model=tiny",
            f"engine.base_url=http://127.0.0.1:{port}/v1",
            f"engine.tokenizer={tiny_model_path}",
            "engine.max_retries=0",
            "modes=[notool]",
            f"limit={LIMIT}",
            "bootstrap=0",
            "report=false",
            f"out={out}",
            "agent.max_new_tokens_per_turn=8",
            "agent.max_total_new_tokens=8",
        ],
    )
    with pytest.raises(InfrastructureErrors, match=f"{LIMIT} episodes failed") as info:
        run_eval(cfg, progress=False)
    assert "rerun the same command" in str(info.value)
    assert list(read_jsonl(out / SAMPLES_FILE)) == []
    failures = list(read_jsonl(out / ERRORS_FILE))
    assert len(failures) == LIMIT and {f["finish_reason"] for f in failures} == {"engine_error"}

    server = serve_in_thread(HFEngine(tiny_model_path), model_name="tiny", port=port)
    try:
        summary = run_eval(cfg, progress=False)
    finally:
        server.stop()
    records = [json.loads(line) for line in (out / SAMPLES_FILE).open()]
    assert len(records) == LIMIT
    assert all(r["finish_reason"] not in ("engine_error", "sandbox_error") for r in records)
    assert summary["overall"]["n_samples"] == LIMIT
    accuracy = summary["overall"]["modes"]["notool"]["accuracy"]
    assert accuracy == sum(r["correct"] for r in records) / LIMIT
