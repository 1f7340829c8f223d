"""GRPO with LoRA (issue 49): the adapters train, and the rollout engine — in-process or a
`beacon serve` server — samples from the merged weights (`served_state_dict`)."""

from __future__ import annotations

import copy
import math
import shutil
from pathlib import Path

import pytest
import torch

from beacon.train.core.checkpoint import latest_checkpoint
from beacon.train.core.config import LoraConfig, ModelConfig
from beacon.train.core.lora import served_state_dict
from beacon.train.core.metrics import read_metrics
from beacon.train.core.setup import load_model
from beacon.train.grpo import run_grpo
from beacon.train.grpo.config import GRPOConfig

from .grpo_helpers import grpo_settings, install_choice_processor


def test_served_weights_are_the_merged_model_under_the_base_names(tiny_model_path: Path):
    model = load_model(ModelConfig(path=str(tiny_model_path), lora=LoraConfig(r=4)))
    torch.manual_seed(0)
    with torch.no_grad():  # B starts at zero: give every adapter a visible delta
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1)
    served = served_state_dict(model)
    merged = copy.deepcopy(model).merge_and_unload().state_dict()
    base = load_model(ModelConfig(path=str(tiny_model_path))).state_dict()
    assert served.keys() == merged.keys() == base.keys()
    assert all(torch.allclose(served[k], merged[k], atol=1e-6) for k in merged)
    changed = [k for k in base if not torch.equal(served[k], base[k])]
    assert changed and all(k.endswith("proj.weight") for k in changed)
    assert not any(t.requires_grad for t in served.values())


def _lora_settings(out: Path) -> dict:
    settings = grpo_settings(out, max_steps=3, lr=5e-2)
    settings["model"]["lora"] = {"r": 4, "alpha": 8}
    return settings


@pytest.mark.slow
def test_grpo_with_lora_trains_adapters_and_the_engine_samples_the_merged_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from beacon.engines.hf import HFEngine

    monkeypatch.setattr(HFEngine, "__init__", HFEngine.__init__)  # restored after the test
    install_choice_processor()
    run_grpo(GRPOConfig.model_validate(_lora_settings(tmp_path / "run")))
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert any(m["sequences"] > 0 and m["grad_norm"] > 0 for m in rows)
    # the engine samples what the trainer scores, also after updates (a step that trains
    # hinted groups only has no gap: NaN)
    gaps = [m["health/sampler_logprob_gap"] for m in rows]
    after_update = [g for g in gaps[1:] if math.isfinite(g)]
    assert after_update and max(after_update) < 1e-3, gaps
    checkpoint = latest_checkpoint(tmp_path / "run")
    assert (checkpoint / "adapter" / "adapter_config.json").exists()


@pytest.mark.slow
def test_grpo_with_lora_pushes_merged_weights_to_a_server(
    tmp_path: Path, tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from beacon.engines.hf import HFEngine
    from beacon.engines.serve import serve_in_thread
    from beacon.engines.serve_guard import ServeSettings

    monkeypatch.setattr(HFEngine, "__init__", HFEngine.__init__)
    install_choice_processor()
    engine = HFEngine(tiny_model_path, batch_size=8)
    handle = serve_in_thread(engine, "beacon", settings=ServeSettings(allow_weight_updates=True))
    try:
        settings = _lora_settings(tmp_path / "run")
        settings["rollout"]["servers"] = [handle.base_url]
        run_grpo(GRPOConfig.model_validate(settings))
    finally:
        handle.stop()
    checkpoint = latest_checkpoint(tmp_path / "run")  # merged weights (save_model)
    merged = load_model(ModelConfig(path=str(checkpoint))).state_dict()
    served = engine.model.state_dict()
    base = load_model(ModelConfig(path=str(tiny_model_path))).state_dict()
    assert any(not torch.equal(merged[k], base[k]) for k in merged)  # the adapters trained
    assert all(torch.allclose(served[k], merged[k], atol=1e-6) for k in merged)
    engine.close()


@pytest.mark.slow
def test_grpo_with_lora_resumes_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run resumed from its step-2 checkpoint (adapters, AdamW state, RNGs) repeats the
    uninterrupted run's step 3."""
    from beacon.engines.hf import HFEngine

    monkeypatch.setattr(HFEngine, "__init__", HFEngine.__init__)
    install_choice_processor()
    run = tmp_path / "run"
    run_grpo(GRPOConfig.model_validate(_lora_settings(run)))
    keys = ("step", "loss", "grad_norm", "rl/reward_mean", "sequences")
    straight = [[m[k] for k in keys] for m in read_metrics(run / "metrics.jsonl")]
    shutil.rmtree(latest_checkpoint(run))  # as if killed after checkpoint-2
    run_grpo(GRPOConfig.model_validate(_lora_settings(run)), resume=True)
    assert [[m[k] for k in keys] for m in read_metrics(run / "metrics.jsonl")] == straight
