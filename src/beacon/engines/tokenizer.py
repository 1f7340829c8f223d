"""`HFTokenizer`: the `ChatTokenizer` of a Hugging Face checkpoint, over its own processor.

It renders chats with the checkpoint's chat template and tokenizes text the way the processor
does, expanding each image placeholder to the number of image tokens that image becomes, so the
ids match what the model consumes (`processor(text=..., images=...)["input_ids"]`). Images are
not turned into pixels here: the token count comes from the image processor's resize rule alone.

Continuing a final message (`continue_final_message=True`) is rendered by appending a sentinel
to the last message and cutting the rendered text there, rather than with the template's own
text search, so it also works when the final message ends in an image (the Thyme observation).
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from beacon.engines.base import GenerationRequest, Message
from beacon.engines.tiny import image_only_processor_class
from beacon.images import load_image

logger = logging.getLogger(__name__)

_SENTINEL = "\u2063BEACON-END-OF-PREFIX\u2063"
_QWEN_VL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")


def load_processor(path: str | Path) -> tuple[Any | None, Any]:
    """(processor or None for a text-only checkpoint, tokenizer) of the checkpoint at `path`.

    Qwen-VL checkpoints get the image-only processor (see `beacon.engines.tiny`), which works
    without torchvision; other checkpoints go through `AutoProcessor`.
    """
    from transformers import AutoProcessor, AutoTokenizer

    model_type = _model_type(path)
    if model_type in _QWEN_VL_TYPES:
        processor = image_only_processor_class(model_type).from_pretrained(str(path))
        return processor, processor.tokenizer
    try:
        processor = AutoProcessor.from_pretrained(str(path))
    except (OSError, ValueError, TypeError, ImportError) as exc:
        logger.info("no multimodal processor for %s (%s); using the tokenizer alone", path, exc)
        return None, AutoTokenizer.from_pretrained(str(path))
    if getattr(processor, "image_processor", None) is None:
        tokenizer = getattr(processor, "tokenizer", processor)
        return None, tokenizer
    return processor, processor.tokenizer


def _model_type(path: str | Path) -> str | None:
    config = Path(path) / "config.json"
    if not config.exists():
        return None
    return json.loads(config.read_text()).get("model_type")


class HFTokenizer:
    """`ChatTokenizer` over a Hugging Face processor (or a bare tokenizer for text-only models)."""

    def __init__(self, processor: Any | None, tokenizer: Any) -> None:
        self.processor = processor
        self.tokenizer = tokenizer
        self.image_token: str | None = getattr(processor, "image_token", None)
        self.image_token_id: int | None = getattr(processor, "image_token_id", None)
        self.image_placeholder = self._placeholder()
        self.vision_token_ids = self._vision_token_ids()
        self.eos_token_ids = self._eos_ids()
        self.pad_token_id: int = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_token_ids[0]
        )

    @classmethod
    def from_pretrained(cls, path: str | Path) -> HFTokenizer:
        """The processor and tokenizer saved with a checkpoint (a folder or a cached hub id),
        wrapped for Beacon's chat rendering."""
        processor, tokenizer = load_processor(path)
        return cls(processor, tokenizer)

    def render_chat(
        self,
        messages: Sequence[Message],
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
    ) -> str:
        """The chat as the template writes it, one `image_placeholder` per image."""
        chat = [_strip_image_data(m) for m in messages]
        if continue_final_message:
            if not chat:
                raise ValueError("continue_final_message=True needs at least one message")
            chat[-1] = _append_text(chat[-1], _SENTINEL)
            add_generation_prompt = False
        owner = self.processor if self.processor is not None else self.tokenizer
        text = owner.apply_chat_template(
            chat, tokenize=False, add_generation_prompt=add_generation_prompt
        )
        if continue_final_message:
            text = text[: text.rindex(_SENTINEL)]
        return text

    def encode(self, text: str, images: Sequence[Image.Image] = ()) -> list[int]:
        """Token ids of `text`; each image placeholder expands to that image's token count."""
        text = self._expand_images(text, images)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def request_ids(self, request: GenerationRequest) -> tuple[list[int], list[Image.Image]]:
        """The context ids of `request` and its images: its `prompt_ids` as given (token-in),
        else its messages rendered and tokenized."""
        if request.prompt_ids is not None:
            return list(request.prompt_ids), list(request.images or [])
        images = message_images(request.messages)
        text = self.render_chat(
            request.messages,
            add_generation_prompt=not request.continue_final_message,
            continue_final_message=request.continue_final_message,
        )
        return self.encode(text, images), images

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of `token_ids`, special tokens included."""
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=False)

    def image_token_count(self, image: Image.Image) -> int:
        """How many image tokens `image` becomes after the processor's resize and merge."""
        if self.processor is None:
            raise ValueError("this checkpoint has no image processor; it cannot take images")
        image_processor = self.processor.image_processor
        width, height = image.size
        patches = image_processor.get_number_of_image_patches(height, width, {})
        return patches // (image_processor.merge_size**2)

    def _expand_images(self, text: str, images: Sequence[Image.Image]) -> str:
        token = self.image_token
        found = text.count(token) if token else 0
        if found != len(images):
            raise ValueError(
                f"text has {found} image placeholders but {len(images)} images were given; "
                f"write one {self.image_placeholder!r} per image, in order"
            )
        if not images:
            return text
        pieces = text.split(token)
        out = [pieces[0]]
        for image, piece in zip(images, pieces[1:], strict=True):
            out.append(token * self.image_token_count(image))
            out.append(piece)
        return "".join(out)

    def _vision_token_ids(self) -> list[int]:
        """Ids that only the processor may write (image/video pads and their brackets).

        A model that generates one would put an image slot without an image into its own
        context, and the next turn could not be run; engines never let it sample them.
        """
        vocab = self.tokenizer.get_vocab()
        names = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
        ids = {vocab[name] for name in names if name in vocab}
        if self.image_token_id is not None:
            ids.add(self.image_token_id)
        return sorted(ids)

    def _placeholder(self) -> str:
        if self.image_token is None:
            return ""
        vocab = self.tokenizer.get_vocab()
        if "<|vision_start|>" in vocab and "<|vision_end|>" in vocab:
            return f"<|vision_start|>{self.image_token}<|vision_end|>"
        return self.image_token

    def _eos_ids(self) -> list[int]:
        ids = [self.tokenizer.eos_token_id]
        for name in ("<|im_end|>", "<|endoftext|>"):
            token_id = self.tokenizer.convert_tokens_to_ids(name)
            if token_id is not None and token_id != self.tokenizer.unk_token_id:
                ids.append(token_id)
        return sorted({i for i in ids if i is not None})


def _strip_image_data(message: Message) -> Message:
    """The message with image parts reduced to {"type": "image"} (templates need no pixels)."""
    content = message.get("content")
    if not isinstance(content, list):
        return dict(message)
    parts = []
    for part in content:
        if is_image_part(part):
            parts.append({"type": "image"})
        else:
            parts.append(dict(part))
    return {**message, "content": parts}


def _append_text(message: Message, text: str) -> Message:
    content = message.get("content")
    if isinstance(content, str):
        return {**message, "content": content + text}
    return {**message, "content": [*(content or []), {"type": "text", "text": text}]}


def message_images(messages: Sequence[Message]) -> list[Image.Image]:
    """The images of a chat in the order their placeholders appear.

    An image part is {"type": "image", "image": <PIL image | path | bytes>} or OpenAI's
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}} (data URLs and
    local paths only: engines never fetch from the network).
    """
    images = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            if not is_image_part(part):
                continue
            if "image" in part:
                images.append(load_image(part["image"]))
            else:
                images.append(load_image(image_url_source(part["image_url"])))
    return images


def is_image_part(part: dict[str, Any]) -> bool:
    """Whether a content part stands for an image (ours or OpenAI's shape)."""
    return part.get("type") in ("image", "image_url") or "image" in part or "image_url" in part


def image_url_source(image_url: Any) -> bytes | str:
    """What an OpenAI `image_url` ({"url": ...} or the URL itself) points at: the bytes of a
    base64 data URL, else a local path (a `file://` prefix removed). Network URLs are refused."""
    url = image_url["url"] if isinstance(image_url, dict) else str(image_url)
    if url.startswith("data:"):
        header, _, payload = url.partition(",")
        if ";base64" not in header:
            raise ValueError(f"image data URL must be base64-encoded, got header {header!r}")
        return base64.b64decode(payload)
    if url.startswith(("http://", "https://")):
        raise ValueError(
            "image URLs over the network are not fetched; send the image as a base64 data URL"
        )
    return url.removeprefix("file://")
