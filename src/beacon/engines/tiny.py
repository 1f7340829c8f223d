"""Tiny random Qwen-VL checkpoints built offline, for tests and CPU demos.

`make_tiny_model(dir, arch)` writes a complete Hugging Face checkpoint (config, safetensors
weights, a byte-level BPE tokenizer trained here on a small built-in corpus, an image processor
and a Qwen-style chat template) that every engine loads by path: `hf`, `vllm` and `beacon serve`.
Nothing is downloaded. The model is random, so it never writes sensible text; tests force tokens
with a logits processor (`beacon.fakes.logits.ScriptedTokens`).

Choices, and why:

1. The chat specials (`<|im_start|>`, `<|vision_start|>`, ...) are special tokens and the Thyme /
   tool-call tags (`<code>`, `</answer>`, `<sandbox_output>`, `<tool_call>`, ...) are added
   (non-special) tokens: each is one token, so stop strings end on a token boundary and forcing
   a tag is one step, while decoding with `skip_special_tokens=True` (vLLM's default) keeps
   the tags.
2. The image processor is `Qwen2VLImageProcessorPil` (torchvision is not installed here) with
   4-16 merged tokens per image, so a forward pass with an image stays in milliseconds.
3. transformers 5 cannot even construct the stock Qwen processors without torchvision (their
   video processor needs it), so `image_only_processor_class` gives a subclass without the video
   attribute. The saved `processor_config.json` names the stock class, so machines with
   torchvision (vLLM) load the stock processor; `load_processor` picks the image-only one here.
4. Weights and tokenizer depend only on `seed` and `arch`: the same call gives the same files.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

logger = logging.getLogger(__name__)

Arch = Literal["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]
ARCHS: tuple[str, ...] = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
CACHE_VERSION = "v1"  # bump when the builder's output changes, so cached models are rebuilt

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
TAG_TOKENS = [
    "<code>",
    "</code>",
    "<answer>",
    "</answer>",
    "<sandbox_output>",
    "</sandbox_output>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]
IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if loop.first and message['role'] != 'system' -%}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- if message['role'] == 'tool' -%}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- endif -%}"
    "{%- if message['content'] is string -%}"
    "{{- message['content'] -}}"
    "{%- else -%}"
    "{%- for part in message['content'] -%}"
    "{%- if part['type'] in ('image', 'image_url') -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif part['type'] == 'text' -%}"
    "{{- part['text'] -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- if message['role'] == 'tool' -%}"
    "{{- '\\n</tool_response>' -}}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)
"""Qwen2-VL's template: default system turn, images in any message, `tool` turns as Qwen2.5
writes them (a user turn wrapping `<tool_response>`)."""

_CORPUS = [
    "You are a helpful assistant. Look at the image and answer the question.",
    "What digit is inside the box? What color is the object on the left? How many cars are there?",
    "The answer is (A). The answer is (B). Options: (A) red (B) blue (C) green (D) yellow.",
    "Image path: /mnt/data/images/image.png. Image size: 448 x 448. Think step by step.",
    "I need to zoom in on the top left corner to read the small text.",
    "<code>\n```python\nfrom PIL import Image\nimage = Image.open(image_path)\n"
    "crop = image.crop((120, 80, 240, 200))\ncrop = crop.resize((448, 448))\n"
    "crop.save('/mnt/data/temp_processed_images/crop_0.png')\n"
    "print('/mnt/data/temp_processed_images/crop_0.png')\n```\n</code>",
    "<sandbox_output>Traceback (most recent call last): NameError: name 'x' is not defined"
    "</sandbox_output>",
    "import numpy as np\nimport cv2\narr = np.array(image)\nprint(arr.shape, arr.mean())\n",
    "for i in range(10):\n    width, height = image.size\n    print(width * i, height // 2)\n",
    '<tool_call>\n{"name": "python", "arguments": {"code": "print(1 + 2)"}}\n</tool_call>',
    "<tool_response>\n3\n</tool_response> The result is 3. <answer>3</answer>",
    "<think>The crop shows the digit 7 clearly.</think> <answer>7</answer>",
    "0 1 2 3 4 5 6 7 8 9 10 12 16 32 64 100 112 128 224 256 448 512 1024 0.5 3.14",
    "the of and to in is that it for on with as was at by this be from or an are which",
]


@dataclass
class TinyModelSpec:
    """Sizes of the tiny model; the defaults load and run a forward pass in milliseconds."""

    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    vision_depth: int = 2
    vision_hidden: int = 32
    vision_heads: int = 2
    vocab_size: int = 800  # BPE target before the tags are added
    min_image_tokens: int = 4  # after the 2x2 merge
    max_image_tokens: int = 16
    initializer_range: float = 0.2  # larger than Qwen's 0.02 so greedy output is not one token


def make_tiny_model(
    out_dir: str | Path,
    arch: Arch = "qwen2_vl",
    seed: int = 0,
    spec: TinyModelSpec | None = None,
) -> Path:
    """Build a tiny random `arch` checkpoint into `out_dir` and return the folder.

    Deterministic: the same `arch`, `seed` and `spec` give identical weights and tokenizer.
    """
    if arch not in ARCHS:
        raise ValueError(f"unknown tiny model arch {arch!r}; choose one of {', '.join(ARCHS)}")
    spec = spec or TinyModelSpec()
    return build_checkpoint(out_dir, arch, _train_tokenizer(spec.vocab_size), spec, seed)


def build_checkpoint(
    out_dir: str | Path, arch: str, tokenizer: Any, spec: TinyModelSpec, seed: int
) -> Path:
    """Write a random `arch` model of `spec` with `tokenizer` (any chat tokenizer with the
    Qwen specials) and its processor to `out_dir`: a checkpoint every engine loads by path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = _build_model(arch, tokenizer, spec, seed)
    processor = _build_processor(arch, tokenizer, spec)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    processor.image_processor.save_pretrained(out)  # preprocessor_config.json for older loaders
    _name_stock_processor_class(out, arch)
    logger.info("built tiny %s model (%d parameters) in %s", arch, model.num_parameters(), out)
    return out


def cached_tiny_model(arch: Arch = "qwen2_vl") -> Path:
    """A tiny `arch` model (seed 0) built once into the cache folder and reused.

    The folder is `$BEACON_CACHE/tiny-<arch>-v1` (default cache `~/.cache/beacon`). It is built
    into a temporary folder and renamed, so concurrent callers never see half a checkpoint.
    """
    root = Path(os.environ.get("BEACON_CACHE", Path.home() / ".cache" / "beacon"))
    target = root / f"tiny-{arch}-{CACHE_VERSION}"
    if (target / "config.json").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".tiny-{arch}-", dir=root))
    make_tiny_model(staging, arch=arch)
    try:
        staging.rename(target)
    except OSError:  # another process finished first; keep its copy
        shutil.rmtree(staging, ignore_errors=True)
    return target


def image_only_processor_class(arch: str) -> type:
    """The stock Qwen processor class of `arch` without its video processor attribute.

    The stock classes list `video_processor` as a required attribute and transformers 5 cannot
    check that attribute without torchvision; Beacon never sends videos.
    """
    from transformers import Qwen2_5_VLProcessor, Qwen2VLProcessor, Qwen3VLProcessor

    stock = {
        "qwen2_vl": Qwen2VLProcessor,
        "qwen2_5_vl": Qwen2_5_VLProcessor,
        "qwen3_vl": Qwen3VLProcessor,
    }[arch]

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        stock.__init__(self, image_processor, tokenizer, None, chat_template=chat_template)

    return type(f"ImageOnly{stock.__name__}", (stock,), {"__init__": __init__})


def _train_tokenizer(vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 3, trainer)
    tok.add_tokens(TAG_TOKENS)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )


def _build_model(arch: str, tokenizer: Any, spec: TinyModelSpec, seed: int) -> Any:
    import torch
    from transformers import AutoModelForImageTextToText

    config = _model_config(arch, tokenizer, spec)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_config(config)
    model.generation_config.eos_token_id = [
        tokenizer.convert_tokens_to_ids("<|im_end|>"),
        tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    ]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.do_sample = False
    return model


def _model_config(arch: str, tokenizer: Any, spec: TinyModelSpec) -> Any:
    """A tiny config; M-RoPE's `mrope_section` must sum to head_dim / 2."""
    from transformers import Qwen2_5_VLConfig, Qwen2VLConfig, Qwen3VLConfig

    ids = {name: tokenizer.convert_tokens_to_ids(name) for name in SPECIAL_TOKENS}
    head_dim = spec.hidden_size // spec.num_heads
    half = head_dim // 2
    mrope = [half - 2 * (half * 3 // 8), half * 3 // 8, half * 3 // 8]
    text = {
        "vocab_size": len(tokenizer),
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "max_position_embeddings": 8192,
        "initializer_range": spec.initializer_range,
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
        "bos_token_id": None,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": mrope},
    }
    common = {
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "tie_word_embeddings": True,
    }
    vis = spec.vision_hidden
    if arch == "qwen2_vl":
        vision = {"depth": spec.vision_depth, "embed_dim": vis, "hidden_size": spec.hidden_size}
        vision |= {"num_heads": spec.vision_heads, "mlp_ratio": 2, "patch_size": 14}
        return Qwen2VLConfig(text_config=text, vision_config=vision, **common)
    if arch == "qwen2_5_vl":
        vision = {"depth": spec.vision_depth, "hidden_size": vis, "intermediate_size": 2 * vis}
        vision |= {"num_heads": spec.vision_heads, "out_hidden_size": spec.hidden_size}
        vision |= {"patch_size": 14}
        vision |= {"window_size": 56, "fullatt_block_indexes": [spec.vision_depth - 1]}
        return Qwen2_5_VLConfig(text_config=text, vision_config=vision, **common)
    text["head_dim"] = head_dim
    text["rope_parameters"]["mrope_interleaved"] = True
    vision = {"depth": spec.vision_depth, "hidden_size": vis, "intermediate_size": 2 * vis}
    vision |= {"num_heads": spec.vision_heads, "out_hidden_size": spec.hidden_size}
    vision |= {"patch_size": 16}
    vision |= {"num_position_embeddings": 64, "deepstack_visual_indexes": [spec.vision_depth - 1]}
    return Qwen3VLConfig(text_config=text, vision_config=vision, **common)


def _build_processor(arch: str, tokenizer: Any, spec: TinyModelSpec) -> Any:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    patch = 16 if arch == "qwen3_vl" else 14
    factor = patch * 2  # one merged token covers a 2x2 block of patches
    stats = {"image_mean": [0.5] * 3, "image_std": [0.5] * 3} if arch == "qwen3_vl" else {}
    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=spec.min_image_tokens * factor * factor,
        max_pixels=spec.max_image_tokens * factor * factor,
        patch_size=patch,
        **stats,
    )
    cls = image_only_processor_class(arch)
    return cls(image_processor=image_processor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE)


def _name_stock_processor_class(out: Path, arch: str) -> None:
    """Write the stock processor class name, so `AutoProcessor` (e.g. in vLLM) can load it."""
    stock = image_only_processor_class(arch).__mro__[1].__name__
    for name in ("processor_config.json", "preprocessor_config.json"):
        path = out / name
        config = json.loads(path.read_text())
        config["processor_class"] = stock
        path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tok_path = out / "tokenizer_config.json"
    tok_config = json.loads(tok_path.read_text())
    tok_config["processor_class"] = stock
    tok_config["tokenizer_class"] = "PreTrainedTokenizerFast"  # a name transformers 4 knows too
    tok_path.write_text(json.dumps(tok_config, indent=2, sort_keys=True) + "\n")
