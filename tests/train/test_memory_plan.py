"""The memory plan (issue 49): its rows for a small made-up model computed by hand, its counts
against the loaded tiny model, the 7B OPD setting that fits under FSDP and not under DDP, and a
run over its device stopping before anything is loaded or written."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from beacon.errors import UserError
from beacon.train.core.config import LoraConfig, ModelConfig
from beacon.train.core.memory import (
    CUDA_RESERVE,
    DEVICE_MEMORY_ENV,
    Launch,
    ModelShape,
    Workload,
    lora_params,
    model_shape,
    plan_memory,
)

from .helpers import sft_settings

SMALL = ModelShape(
    params=1000,
    trainable=1000,
    vision_params=0,
    layers=2,
    heads=2,
    hidden=8,
    intermediate=16,
    kv_hidden=4,
    vocab=50,
    vision_layers=0,
    vision_hidden=0,
    vision_intermediate=0,
)
WORK = Workload(tokens=10, row=5, logit_tokens=10)
CPU = Launch(1, "none", bf16=False, cuda=False, device_bytes=10**9)


def test_the_rows_of_a_small_model_by_hand():
    plan = plan_memory(SMALL, ModelConfig(path="-"), CPU, WORK)
    # a layer per token, float32: 4 (10 h + 4 I + heads + 2 + row) = 4 (80 + 64 + 2 + 2 + 5)
    layer = 612
    # once per model, per token: 4 (3 h + 1) + 8 head_dim + 8 row = 100 + 32 + 40
    once = 172
    assert plan.rows == {
        "parameters": 4000,
        "master weights": 0,
        "gradients": 4000,
        "optimizer (AdamW)": 8000,
        "activations": 10 * once + 10 * 2 * layer,
        "bf16 weight copies": 0,
        "logits": 4 * 10 * 50 * 4,
        "teacher": 0,
        "rollout engine": 0,
        "reserve": 0,
    }
    assert plan.total == 4000 + 4000 + 8000 + 13960 + 8000
    # checkpointing: each layer keeps its float32 input (4 h), one layer's set is recomputed
    assert plan.activations_other == 10 * once + 4 * 10 * 8 * 2 + 10 * layer


@pytest.mark.parametrize(
    ("launch", "params", "master", "grads", "optimizer", "copies"),
    [
        (Launch(2, "ddp", False, False, 10**9), 4000, 0, 8000, 8000, 0),  # reducer buckets
        (Launch(4, "fsdp", True, True, 10**9), 1000, 0, 1000, 2000, 0),
        (Launch(4, "zero2", True, True, 10**9), 2000, 1000, 500, 2000, 0),
        (Launch(4, "zero3", True, True, 10**9), 500, 1000, 500, 2000, 0),
        (Launch(1, "none", True, True, 10**9), 4000, 0, 4000, 8000, 2000),  # autocast copies
    ],
)
def test_sharding_and_precision_split_the_state(launch, params, master, grads, optimizer, copies):
    rows = plan_memory(SMALL, ModelConfig(path="-"), launch, WORK).rows
    got = [rows[k] for k in ("parameters", "master weights", "gradients", "optimizer (AdamW)")]
    assert got == [params, master, grads, optimizer]
    assert rows["bf16 weight copies"] == copies
    assert rows["reserve"] == (CUDA_RESERVE if launch.cuda else 0)


def test_the_teacher_and_the_engine_rows():
    work = Workload(10, 5, 10, teacher=SMALL, engine_rows=3, engine_tokens=7)
    rows = plan_memory(SMALL, ModelConfig(path="-"), CPU, work).rows
    assert rows["teacher"] == 4 * 1000  # float32, as load_teacher_model holds it
    # float32 weights on CPU + KV cache: rows x tokens x layers x (key, value) x kv x 4 bytes
    assert rows["rollout engine"] == 4 * 1000 + 3 * 7 * 2 * 2 * 4 * 4


def test_counts_match_the_loaded_tiny_model(tiny_model_path: Path):
    from beacon.train.core.setup import load_model

    for cfg in (
        ModelConfig(path=str(tiny_model_path)),
        ModelConfig(path=str(tiny_model_path), freeze_vision=True),
        ModelConfig(path=str(tiny_model_path), lora=LoraConfig(r=4)),
    ):
        model = load_model(cfg)
        shape = model_shape(cfg.path, cfg)
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        assert shape.trainable == trainable
        if cfg.lora is None:
            assert shape.params == sum(p.numel() for p in model.parameters())


def test_lora_counts_every_linear_peft_would_wrap():
    net = torch.nn.ModuleDict({"q_proj": torch.nn.Linear(8, 16), "other": torch.nn.Linear(8, 8)})
    assert lora_params(net, ["q_proj"], r=4) == 4 * (8 + 16)


QWEN25_VL_7B = ModelShape(  # Qwen/Qwen2.5-VL-7B-Instruct's config.json (gpu_real_size.SHAPES)
    params=8_292_166_656,
    trainable=8_292_166_656,
    vision_params=676_550_144,
    layers=28,
    heads=28,
    hidden=3584,
    intermediate=18944,
    kv_hidden=512,
    vocab=152064,
    vision_layers=32,
    vision_hidden=1280,
    vision_intermediate=3420,
)


def test_opd_7b_student_and_teacher_fit_8_gpus_under_fsdp_not_ddp():
    """ReVuE's setting: full fine-tuning of a 7B student beside its in-process 7B teacher and
    its rollout engine, 8 x 96 GB, bf16, episodes of 4096 tokens, checkpointing."""
    work = Workload(4096, 4096, 128, teacher=QWEN25_VL_7B, engine_rows=16, engine_tokens=4096)
    model = ModelConfig(path="-", gradient_checkpointing=True)
    ddp = plan_memory(QWEN25_VL_7B, model, Launch(8, "ddp", True, True, 96 * 10**9), work)
    fsdp = plan_memory(QWEN25_VL_7B, model, Launch(8, "fsdp", True, True, 96 * 10**9), work)
    assert not ddp.fits and fsdp.fits
    assert ddp.rows["optimizer (AdamW)"] == 8 * QWEN25_VL_7B.params
    assert fsdp.rows["optimizer (AdamW)"] == QWEN25_VL_7B.params


def _sft_config(tmp_path: Path, model: Path, data: Path) -> Path:
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(sft_settings(model, data, tmp_path / "run")))
    return path


def test_dry_run_prints_the_plan_and_writes_nothing(
    tmp_path, tiny_model_path, train_data, monkeypatch
):
    from beacon.cli import app

    monkeypatch.delenv(DEVICE_MEMORY_ENV, raising=False)  # --device-memory-gb sets it

    config = _sft_config(tmp_path, tiny_model_path, train_data)
    result = CliRunner().invoke(app, ["train", "sft", "--config", str(config), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "memory plan: beacon train sft" in result.output and "fits" in result.output
    assert not (tmp_path / "run").exists()
    planned = ["--processes", "8", "--sharding", "fsdp", "--device-memory-gb", "96"]
    result = CliRunner().invoke(app, ["train", "sft", "-c", str(config), "--dry-run", *planned])
    assert "8 x cpu fsdp" in result.output and "of 89.41" in result.output


def test_a_run_over_its_device_stops_before_loading_with_what_would_fit(
    tmp_path, tiny_model_path, train_data, monkeypatch
):
    from beacon.train.core.memory import current_launch, plan_for
    from beacon.train.sft import SFTConfig, run_sft

    cfg = SFTConfig.model_validate(sft_settings(tiny_model_path, train_data, tmp_path / "run"))
    halved = cfg.model_copy(deep=True)
    halved.train.max_tokens_per_microbatch //= 2
    launch = current_launch(cfg.model)
    between = (plan_for(cfg, launch).total + plan_for(halved, launch).total) / 2
    monkeypatch.setenv(DEVICE_MEMORY_ENV, str(between / 1e9))
    with pytest.raises(UserError, match=r"would fit: .*half the rows per micro-batch"):
        run_sft(cfg)
    assert not (tmp_path / "run" / "config.yaml").exists()
