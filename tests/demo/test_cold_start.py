"""The cold start `beacon demo --quick` starts from: shipped in the package, loadable, and made
with the demo's current settings and tokenizer (else `--quick` would not show the full demo's
model: remake it with `beacon demo --export-cold-start src/beacon/demo/assets/cold_start`)."""

from __future__ import annotations

import json

import pytest

from beacon.demo.config import DemoConfig, cold_start_identity
from beacon.demo.model import demo_tokenizer
from beacon.demo.pipeline import COLD_START_RECORD, shipped_cold_start

REMAKE = "remake it with: beacon demo --export-cold-start src/beacon/demo/assets/cold_start"


def test_the_shipped_cold_start_was_made_with_the_current_settings() -> None:
    record = json.loads((shipped_cold_start() / COLD_START_RECORD).read_text())
    assert record["settings"] == cold_start_identity(DemoConfig()), REMAKE


def test_the_shipped_cold_start_loads_with_the_demo_tokenizer() -> None:
    from transformers import AutoModelForImageTextToText

    from beacon.engines.tokenizer import HFTokenizer

    folder = shipped_cold_start()
    model = AutoModelForImageTextToText.from_pretrained(folder)
    assert 1_000_000 < sum(p.numel() for p in model.parameters()) < 2_000_000
    shipped = HFTokenizer.from_pretrained(folder).tokenizer.get_vocab()
    assert shipped == demo_tokenizer().get_vocab(), REMAKE


def test_quick_needs_no_data_stage_and_refuses_revue() -> None:
    from beacon.demo.config import QUICK
    from beacon.demo.pipeline import DemoStages

    cfg = DemoConfig.model_validate({**QUICK, "out": "unused"})
    names = [stage.name for stage in DemoStages(cfg).stages()]
    assert names[0] == "evaluate the SFT model" and not any("SFT data" in n for n in names)
    with pytest.raises(ValueError, match=r"revue\.enabled=false"):
        DemoConfig.model_validate({**QUICK, "revue": {"enabled": True}})
