"""LoRA through peft, with gradient checkpointing: only adapters train, the checkpoint holds
merged weights any engine loads, and the adapter beside them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from beacon.train.core.checkpoint import latest_checkpoint
from beacon.train.core.metrics import read_metrics
from beacon.train.sft import SFTConfig, run_sft

from .helpers import sft_settings


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
