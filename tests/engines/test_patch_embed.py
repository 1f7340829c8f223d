"""Patch embeddings as a matrix product: the same numbers, names and checkpoints as the Conv3d."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from torch import nn
from transformers import AutoModelForImageTextToText

from beacon.engines import patch_embed
from beacon.engines.hf import HFEngine
from beacon.engines.patch_embed import PatchConv3d, linear_patch_embeddings
from beacon.train.core.setup import load_model
from beacon.train.sft import SFTConfig


def _conv_pair(bias: bool) -> tuple[nn.Conv3d, nn.Conv3d]:
    torch.manual_seed(0)
    conv = nn.Conv3d(3, 16, kernel_size=(2, 14, 14), stride=(2, 14, 14), bias=bias)
    fast = nn.Conv3d(3, 16, kernel_size=(2, 14, 14), stride=(2, 14, 14), bias=bias)
    fast.load_state_dict(conv.state_dict())
    assert linear_patch_embeddings(fast) == 1
    return conv, fast


@pytest.mark.parametrize("bias", [False, True])
def test_output_and_gradients_equal_the_convolution(bias: bool) -> None:
    conv, fast = _conv_pair(bias)
    x = torch.randn(37, 3, 2, 14, 14)
    x_conv, x_fast = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_conv, out_fast = conv(x_conv), fast(x_fast)
    assert out_fast.shape == out_conv.shape == (37, 16, 1, 1, 1)
    torch.testing.assert_close(out_fast, out_conv, rtol=1e-5, atol=1e-5)
    upstream = torch.randn_like(out_conv)
    out_conv.backward(upstream)
    out_fast.backward(upstream)
    torch.testing.assert_close(x_fast.grad, x_conv.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fast.weight.grad, conv.weight.grad, rtol=1e-4, atol=1e-4)
    if bias:
        torch.testing.assert_close(fast.bias.grad, conv.bias.grad, rtol=1e-5, atol=1e-5)


def test_other_input_shapes_use_the_convolution() -> None:
    conv, fast = _conv_pair(bias=False)
    x = torch.randn(2, 3, 4, 28, 42)  # several patches per sample: a real sliding convolution
    torch.testing.assert_close(fast(x), conv(x))
    assert fast(x).shape == (2, 16, 2, 2, 3)


def test_only_non_overlapping_convolutions_are_switched() -> None:
    model = nn.Sequential(
        nn.Conv3d(3, 4, kernel_size=2, stride=1),  # overlapping
        nn.Conv3d(3, 4, kernel_size=2, stride=2, padding=1),  # padded
        nn.Conv3d(4, 4, kernel_size=2, stride=2, groups=2),  # grouped
        nn.Conv2d(3, 4, kernel_size=2, stride=2),  # not 3-D
        nn.Conv3d(3, 4, kernel_size=2, stride=2),
    )
    assert linear_patch_embeddings(model) == 1
    assert [type(m) is PatchConv3d for m in model] == [False, False, False, False, True]
    assert all(isinstance(m, nn.Conv3d) for m in list(model)[:3])


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_tiny_model_logits_names_and_checkpoint_unchanged(
    tiny_dir: Callable[[str], Path], tmp_path: Path, arch: str
) -> None:
    path = tiny_dir(arch)
    stock = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).eval()
    fast = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).eval()
    assert linear_patch_embeddings(fast) == 1
    assert list(fast.state_dict()) == list(stock.state_dict())

    proj = stock.model.visual.patch_embed.proj
    torch.manual_seed(1)
    pixel_values = torch.randn(16, proj.weight[0].numel())  # 16 patches: 4 merged image tokens
    grid = torch.tensor([[1, 4, 4]])
    with torch.no_grad():
        a = stock.model.visual(pixel_values, grid_thw=grid).pooler_output
        b = fast.model.visual(pixel_values, grid_thw=grid).pooler_output
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)

    fast.save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as saved:
        names = saved.keys()  # a safetensors file is not iterable
        weight = next(k for k in names if k.endswith("patch_embed.proj.weight"))
        assert len(saved.get_slice(weight).get_shape()) == 5  # still the Conv3d's layout
    reloaded = AutoModelForImageTextToText.from_pretrained(tmp_path, dtype=torch.float32)
    assert type(reloaded.model.visual.patch_embed.proj) is nn.Conv3d  # nothing in config.json


def test_every_loader_uses_the_matrix_product(
    tiny_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    path = tiny_dir("qwen2_vl")
    engine = HFEngine(str(path))
    try:
        assert type(engine.model.model.visual.patch_embed.proj) is PatchConv3d
    finally:
        engine.close()
    cfg = SFTConfig.model_validate(
        {
            "model": {"path": str(path)},
            "data": {"train": ["unused.jsonl"]},
            "train": {"output_dir": str(tmp_path / "run")},
        }
    )
    assert type(load_model(cfg.model).model.visual.patch_embed.proj) is PatchConv3d


def test_off_the_cpu_the_stock_convolution_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The matrix product is measured on the CPU only: a tensor elsewhere (here on the meta
    device) takes the convolution, a CPU tensor the matrix product."""
    calls: list[str] = []
    linear = patch_embed.F.linear

    def counted(*args: object) -> torch.Tensor:
        calls.append(args[0].device.type)
        return linear(*args)

    monkeypatch.setattr(patch_embed.F, "linear", counted)
    proj = nn.Conv3d(3, 4, kernel_size=2, stride=2)
    linear_patch_embeddings(nn.Sequential(proj))
    proj(torch.randn(5, 3, 2, 2, 2))
    proj.to("meta")(torch.empty(5, 3, 2, 2, 2, device="meta"))
    assert calls == ["cpu"]


def test_the_switch_leaves_every_model_its_convolution(
    tiny_dir: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(patch_embed.SWITCH, "0")
    conv = nn.Conv3d(3, 4, kernel_size=2, stride=2)
    assert linear_patch_embeddings(nn.Sequential(conv)) == 0
    assert type(conv) is nn.Conv3d
    engine = HFEngine(str(tiny_dir("qwen2_vl")))
    try:
        assert type(engine.model.model.visual.patch_embed.proj) is nn.Conv3d
    finally:
        engine.close()
