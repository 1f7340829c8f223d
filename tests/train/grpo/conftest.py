"""The tiny model in float64 with its tokenizer, loaded once for the rl tests that need it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch


@dataclass
class TinyLM:
    tokenizer: Any
    model: Any

    def prompt(self, text: str) -> list[int]:
        """Token ids of a one-turn user chat, ready for the assistant's answer."""
        message = {"role": "user", "content": [{"type": "text", "text": text}]}
        return self.tokenizer.encode(
            self.tokenizer.render_chat([message], add_generation_prompt=True)
        )


@pytest.fixture(scope="module")
def tiny_lm(tiny_model_path: Path) -> TinyLM:
    from transformers import AutoModelForImageTextToText

    from beacon.engines.tokenizer import HFTokenizer

    model = AutoModelForImageTextToText.from_pretrained(tiny_model_path, dtype=torch.float64)
    return TinyLM(HFTokenizer.from_pretrained(tiny_model_path), model.eval())
