"""The demo's model: a ~1.3M-parameter Qwen2-VL with a phrase-level tokenizer, built offline.

A from-scratch model on 2 CPU cores has minutes to learn, so every token it must predict or
attend to costs. Two choices make the demo's sequences short without leaving the real path
(the checkpoint is an ordinary Hugging Face folder every engine and trainer loads by path):

1. The tokenizer splits text into single characters (so coordinates are digit by digit and a
   copy is a fixed-offset copy), except for the fixed phrases of the demo's prompts and code
   (the Thyme system prompt, the question's opening, `image.crop((`, ...), which are one added
   token each. Any ASCII text still encodes and decodes exactly.
2. Images are 112x112 (16 merged image tokens), the scale `beacon.benchmarks.synth_demo` sizes
   its digits against.

Sizes follow `../shared/research/feasibility_tiny_zoom.md` (run2: 2 text layers, hidden 128,
vision depth 2, embed 128), which learned the crop task by SFT in about 10 minutes.
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

from beacon.agent.formats import THYME
from beacon.agent.prompts import NOTOOL_INSTRUCTION
from beacon.benchmarks.synth_demo import COLS, ROWS, cell_name
from beacon.demo.expert import KEYS_PHRASES
from beacon.engines.tiny import (
    CHAT_TEMPLATE,
    SPECIAL_TOKENS,
    TAG_TOKENS,
    TinyModelSpec,
    build_checkpoint,
)
from beacon.sandbox.inputs import PIL_INPUT_EXT
from beacon.sandbox.sandbox import jailed_input_path
from beacon.train.opd.score import REFLECTION_HEADER
from beacon.train.opd.scripted_critic import GROUNDING, KEYS_REFLECTION_PHRASES

DEMO_MODEL_FILE = "beacon_demo.json"
"""Written last into a demo model's folder (how it was built): the folder holds a whole model."""
DEMO_SPEC = TinyModelSpec(
    hidden_size=128,
    intermediate_size=512,
    num_layers=2,
    num_heads=4,
    num_kv_heads=4,
    vision_depth=2,
    vision_hidden=128,
    vision_heads=4,
    min_image_tokens=16,
    max_image_tokens=16,
    initializer_range=0.02,
)

REFLECTION_PHRASES = [
    REFLECTION_HEADER,
    "\nAnchor evidence: ",
    " supporting image(s) placed after the original image.",
    "the original.",
    "\nQuery slot: ",
    "\nObserved value: ",
    '\nVisual fact: the image shows {"digit": ',
    ', "decoy": null}',
    ', "decoy": ',
    f"\nGrounding rule: {GROUNDING['rule']}",
    "\nBreak point: first broken link ACQUIRE. Discrepancy: answered '",
    "' without a view that shows the digit clearly",
    "\nBreak point: first broken link READ. Discrepancy: answered '",
    "' although its evidence shows '",
    "\nBreak point: first broken link OTHER. Discrepancy: no final answer given",
    "\nBreak point: none; this attempt's final answer is correct.",
]
"""The fixed text of the ReVuE teacher's reflections
(`beacon.train.opd.score.reflection_text` over the scripted critic's output,
`beacon.train.opd.scripted_critic`): most of a reflection-conditioned prompt, ~400 characters,
would otherwise be one token per character."""

PHRASES = [
    THYME.system_prompt,
    "You are a helpful assistant.",
    NOTOOL_INSTRUCTION,
    "system\n",
    "user\n",
    "assistant\n",
    f'### User Image Path: "{jailed_input_path(0, PIL_INPUT_EXT)}"',
    '### User Image Size: "448x448"',
    "What digit is inside the box at (",
    "What digit is inside the box?",
    ")?",
    "\n\nHint: ",
    "The box is in ",
    " of the image.",
    *(cell_name(r, c) for r in range(len(ROWS)) for c in range(len(COLS))),
    "\n```python\nimage.crop((",
    ")).show()\n```\n",
    "\n\n",
    *REFLECTION_PHRASES,
    *KEYS_PHRASES,
    *KEYS_REFLECTION_PHRASES,
]
"""Fixed strings of the demo's episodes that become one token each (longest match wins).
Each must be the text an episode really holds, split where the agent splits it: the code
segment starts after `<code>` (a tag token of its own), the path line names the file the
sandbox writes. A phrase that matches no episode costs nothing but leaves its text one token
per character, so the demo's tests check real episodes and reflections for letter tokens."""

CHARACTERS = [c for c in string.printable if c not in "\x0b\x0c\r"]


def demo_tokenizer() -> Any:
    """Character-level vocabulary plus the chat specials, the format tags and `PHRASES`."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, "<unk>", *CHARACTERS])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(SPECIAL_TOKENS)
    tok.add_tokens([*TAG_TOKENS, *PHRASES])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<unk>",
        chat_template=CHAT_TEMPLATE,
    )


def make_demo_model(out_dir: str | Path, seed: int = 0) -> Path:
    """Write the demo's random-init checkpoint to `out_dir` (same seed, same files)."""
    out = build_checkpoint(out_dir, "qwen2_vl", demo_tokenizer(), DEMO_SPEC, seed)
    info = {"builder": "beacon.demo.model", "seed": seed, "phrases": len(PHRASES)}
    (out / DEMO_MODEL_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return out
