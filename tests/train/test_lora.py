"""LoRA through peft, with gradient checkpointing: only adapters train, the checkpoint holds
merged weights any engine loads, and the adapter beside them; the rollout engine gets the merged
weights (`rollout_state_dict`), and a GRPO run with adapters resumes exactly."""

from __future__ import annotations

import copy
import math
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from beacon.train.core.checkpoint import latest_checkpoint
from beacon.train.core.config import LoraConfig, ModelConfig
from beacon.train.core.metrics import read_metrics
from beacon.train.core.setup import load_model, rollout_state_dict
from beacon.train.grpo.config import GRPOConfig
from beacon.train.grpo.recipe import run_grpo
from beacon.train.sft import SFTConfig, run_sft

from .grpo_helpers import choice_processors, grpo_settings
from .helpers import sft_settings

pytest.importorskip("peft")


@pytest.mark.slow
def test_lora_sft_saves_merged_weights(
    tiny_model_path: Path, train_data: Path, tmp_path: Path
) -> None:
    settings = sft_settings(
        tiny_model_path, train_data, tmp_path / "run", max_steps=2, save_every=2
    )
    settings["model"] |= {"lora": {"r": 4, "alpha": 8}, "gradient_checkpointing": True}
    run_sft(SFTConfig.model_validate(settings))
    losses = [m["loss"] for m in read_metrics(tmp_path / "run" / "metrics.jsonl")]
    assert len(losses) == 2 and all(loss == loss for loss in losses)
    checkpoint = latest_checkpoint(tmp_path / "run")
    merged = load_file(checkpoint / "model.safetensors")
    base = load_file(tiny_model_path / "model.safetensors")
    assert not any("lora" in k for k in merged)
    assert (checkpoint / "adapter" / "adapter_config.json").exists()
    changed = [k for k in base if k in merged and not torch.equal(base[k], merged[k])]
    assert changed and all("proj" in k and "visual" not in k for k in changed), changed

    from beacon.engines import load_engine

    assert load_engine("hf", str(checkpoint)) is not None


def _lora_policy(path: Path) -> torch.nn.Module:
    model = load_model(ModelConfig(path=str(path), lora=LoraConfig(r=4, alpha=8.0)))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # B starts at zero: give the adapters an update to merge
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
    return model


def test_rollout_weights_equal_the_merged_model(tiny_model_path: Path) -> None:
    policy = _lora_policy(tiny_model_path)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    weights = rollout_state_dict(policy)
    merged = copy.deepcopy(policy).merge_and_unload().state_dict()
    plain = load_model(ModelConfig(path=str(tiny_model_path))).state_dict()
    assert sorted(weights) == sorted(merged) == sorted(plain)
    changed = [k for k in weights if not torch.equal(weights[k], plain[k])]
    assert changed and all(k.endswith("_proj.weight") for k in changed)
    for key, value in weights.items():
        torch.testing.assert_close(value, merged[key], rtol=0, atol=1e-6)
    after = policy.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_a_plain_model_gives_its_own_state_dict(tiny_model_path: Path) -> None:
    model = load_model(ModelConfig(path=str(tiny_model_path)))
    weights = rollout_state_dict(model)
    assert all(weights[k] is v or torch.equal(weights[k], v) for k, v in model.state_dict().items())


@pytest.mark.slow
def test_grpo_with_lora_trains_adapters_pushes_merged_weights_and_resumes_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three GRPO steps with adapters; then the folder cut back to checkpoint-2 (what a kill
    after step 2 leaves) and resumed: step 3's metrics and the final adapters are identical."""
    from beacon.engines.hf import HFEngine

    pushed: list[dict[str, torch.Tensor]] = []
    load_weights = HFEngine.load_weights
    monkeypatch.setattr(
        HFEngine, "load_weights", lambda self, sd: pushed.append(sd) or load_weights(self, sd)
    )

    def settings(out: Path) -> dict:
        values = grpo_settings(out)
        values["model"]["lora"] = {"r": 4, "alpha": 8.0}
        return values

    run = tmp_path / "run"
    assert run_grpo(GRPOConfig.model_validate(settings(run)), False, choice_processors).step == 3
    assert pushed and not any(".lora_" in k or "base_layer" in k for k in pushed[-1])
    rows = read_metrics(run / "metrics.jsonl")
    assert any(m["grad_norm"] > 0 for m in rows)  # the adapters trained
    # the engine samples what the trainer scores, also after updates (a step that trains
    # hinted groups only has no gap: NaN)
    gaps = [m["health/sampler_logprob_gap"] for m in rows]
    after_update = [g for g in gaps[1:] if math.isfinite(g)]
    assert after_update and max(after_update) < 1e-3, gaps

    straight = tmp_path / "straight"
    shutil.copytree(run, straight)
    shutil.rmtree(run / "checkpoint-3")
    run_grpo(GRPOConfig.model_validate(settings(run)), True, choice_processors)
    keys = ("step", "loss", "grad_norm", "rl/reward_mean", "rl/accuracy")
    assert [[m[k] for k in keys] for m in read_metrics(run / "metrics.jsonl")] == [
        [m[k] for k in keys] for m in rows
    ]
    adapter = "checkpoint-3/adapter/adapter_model.safetensors"
    resumed, uninterrupted = load_file(run / adapter), load_file(straight / adapter)
    assert resumed.keys() == uninterrupted.keys()
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in resumed)


@pytest.mark.slow
def test_opd_with_lora_trains_adapters_and_resumes_exactly(
    tiny_model_path: Path, teacher_path: Path, tmp_path: Path
) -> None:
    """Two OPD steps with adapters on the student (scored through the prepared peft model);
    the folder cut back to checkpoint-1 and resumed repeats step 2 and its adapters exactly."""
    from beacon.train.opd import run_opd
    from beacon.train.opd.config import OPDConfig

    from .opd_helpers import opd_settings

    def settings(out: Path) -> OPDConfig:
        values = opd_settings(tiny_model_path, teacher_path, out)
        values["model"]["lora"] = {"r": 4, "alpha": 8.0}
        return OPDConfig.model_validate(values)

    run = tmp_path / "run"
    assert run_opd(settings(run)).step == 2
    rows = read_metrics(run / "metrics.jsonl")
    assert all(m["loss"] > 0 for m in rows) and any(m["grad_norm"] > 0 for m in rows)
    straight = tmp_path / "straight"
    shutil.copytree(run, straight)
    shutil.rmtree(run / "checkpoint-2")
    run_opd(settings(run), resume=True)
    keys = ("step", "loss", "grad_norm", "loss_tokens")
    assert [[m[k] for k in keys] for m in read_metrics(run / "metrics.jsonl")] == [
        [m[k] for k in keys] for m in rows
    ]
    adapter = "checkpoint-2/adapter/adapter_model.safetensors"
    resumed, uninterrupted = load_file(run / adapter), load_file(straight / adapter)
    assert resumed.keys() == uninterrupted.keys()
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in resumed)
    merged = load_file(run / "checkpoint-2" / "model.safetensors")
    assert not any("lora" in k for k in merged)


@pytest.mark.slow
def test_grpo_with_lora_pushes_merged_weights_to_a_server(
    tmp_path: Path, tiny_model_path: Path
) -> None:
    """Served rollouts: after the run the server holds the checkpoint's merged weights."""
    from beacon.engines.hf import HFEngine
    from beacon.engines.serve import serve_in_thread
    from beacon.engines.serve_guard import ServeSettings
    from beacon.engines.tokenizer import HFTokenizer

    tok = HFTokenizer.from_pretrained(tiny_model_path)
    engine = HFEngine(
        tiny_model_path, batch_size=8, tokenizer=tok, logits_processors=choice_processors(tok)
    )
    handle = serve_in_thread(engine, "beacon", settings=ServeSettings(allow_weight_updates=True))
    try:
        settings = grpo_settings(tmp_path / "run", max_steps=2)
        settings["model"]["lora"] = {"r": 4, "alpha": 8.0}
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
