"""The tiny offline Qwen-VL builder: deterministic, complete, loadable, one token per tag."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from beacon.engines.base import GenerationRequest, SamplingParams
from beacon.engines.cli import tiny_app
from beacon.engines.tiny import (
    ARCHS,
    IMAGE_PLACEHOLDER,
    SPECIAL_TOKENS,
    TAG_TOKENS,
    cached_tiny_model,
    make_tiny_model,
)

from .helpers import user_turn


def _same_weights(a: Path, b: Path) -> bool:
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize("arch", ARCHS)
def test_same_seed_gives_identical_checkpoint(arch, tiny_dir, tmp_path):
    again = make_tiny_model(tmp_path / "again", arch=arch, seed=0)
    first = tiny_dir(arch)
    assert (again / "tokenizer.json").read_bytes() == (first / "tokenizer.json").read_bytes()
    assert (again / "config.json").read_text() == (first / "config.json").read_text()
    assert _same_weights(first, again)


def test_other_seed_gives_other_weights(tiny_dir, tmp_path):
    other = make_tiny_model(tmp_path / "seed1", arch="qwen2_vl", seed=1)
    assert not _same_weights(tiny_dir("qwen2_vl"), other)


def test_building_leaves_the_global_rng_alone(tmp_path):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    make_tiny_model(tmp_path / "m", arch="qwen2_vl", seed=7)
    assert torch.equal(torch.rand(3), expected)


def test_specials_and_tags_are_single_tokens(tiny_dir):
    from beacon.engines.tokenizer import HFTokenizer

    tok = HFTokenizer.from_pretrained(tiny_dir("qwen2_vl"))
    for name in SPECIAL_TOKENS + TAG_TOKENS:
        assert len(tok.tokenizer(name, add_special_tokens=False)["input_ids"]) == 1, name
    assert tok.image_placeholder == IMAGE_PLACEHOLDER


@pytest.mark.parametrize("arch", ARCHS)
def test_every_arch_generates_from_an_image_chat(arch, tiny_dir, images):
    from beacon.engines.hf import HFEngine

    engine = HFEngine(tiny_dir(arch))
    chat = [user_turn("What is in the image?", images[0])]
    [result] = engine.generate([GenerationRequest(chat, SamplingParams(max_new_tokens=4))])
    assert result.error is None
    assert len(result.token_ids) == len(result.logprobs) > 0
    assert result.text == engine.tokenizer.decode(result.token_ids)


def test_cached_tiny_model_builds_once(tmp_path, monkeypatch):
    monkeypatch.setenv("BEACON_CACHE", str(tmp_path))
    path = cached_tiny_model("qwen2_vl")
    assert path == tmp_path / "tiny-qwen2_vl-v1"
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert cached_tiny_model("qwen2_vl") == path
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == ["tiny-qwen2_vl-v1"]


def test_unknown_arch_is_refused(tmp_path):
    with pytest.raises(ValueError, match="qwen2_vl, qwen2_5_vl, qwen3_vl"):
        make_tiny_model(tmp_path, arch="llava")  # type: ignore[arg-type]


def test_cli_tiny_make(tmp_path):
    result = CliRunner().invoke(tiny_app, ["make", str(tmp_path / "m"), "--arch", "qwen2_5_vl"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "m" / "model.safetensors").exists()
    assert '"model_type": "qwen2_5_vl"' in (tmp_path / "m" / "config.json").read_text()


def test_cli_tiny_make_rejects_unknown_arch(tmp_path):
    result = CliRunner().invoke(tiny_app, ["make", str(tmp_path / "m"), "--arch", "gpt2"])
    assert result.exit_code != 0
    assert "choose one of" in result.output
