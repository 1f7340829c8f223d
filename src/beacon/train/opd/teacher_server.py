"""The OPD teacher behind HTTP: top-K log-probs and the sampled token's log-prob on given tokens.

A large teacher rarely fits beside the student. `create_teacher_app` serves an in-process
`SequenceScorer` at `POST /v1/score`; `RemoteTeacher` is its client with the same
`teacher_scores(encoded, k, chunk_size)` method, so `opd_step` does not know which one it has
(`teacher.base_url` picks). The reduction to top-K happens on the server (`teacher_topk`), so
only T x K numbers cross the wire, never T x V.

Wire format (JSON): request `{"input_ids": [...], "loss_mask": [...], "images": [{"key": k,
"png": base64}], "k": K, "chunk_size": C}` with the images in token order; response
`{"topk_ids": [[...]], "topk_logprobs": [[...]], "sampled_logprob": [...]}` for the supervised
positions. Float32 values survive JSON exactly, so scores equal the in-process ones.

What is not covered: vLLM's `prompt_logprobs` on multimodal token prompts (the GPU-scale
teacher server) needs its own client; this server runs the `hf` path on one device.
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import torch
from PIL import Image

from beacon.engines.http import HttpClient, Retryable
from beacon.engines.patch_embed import linear_patch_embeddings
from beacon.engines.serve_guard import BearerAuth
from beacon.engines.tokenizer import HFTokenizer
from beacon.images import encode_png
from beacon.train.core.collate import PixelCache
from beacon.train.core.encode import EncodedTrajectory
from beacon.train.opd.revue_loss import TeacherScores
from beacon.train.opd.score import SequenceScorer


class RemoteTeacher:
    """Client of a teacher server; `load_key` turns the sequence's image keys into images."""

    def __init__(
        self, base_url: str, load_key: Any, timeout_s: float = 600.0, api_key: str | None = None
    ) -> None:
        self.url = base_url.rstrip("/") + "/score"
        self.load_key = load_key
        self.client = HttpClient(self.url, api_key, timeout_s, concurrency=1)

    def teacher_scores(self, encoded: EncodedTrajectory, k: int, chunk_size: int) -> TeacherScores:
        images = [
            {"key": key, "png": base64.b64encode(encode_png(self.load_key(key))).decode("ascii")}
            for key in dict.fromkeys(encoded.images)
        ]
        body = {
            "input_ids": encoded.input_ids,
            "loss_mask": encoded.loss_mask,
            "image_keys": encoded.images,
            "images": images,
            "k": k,
            "chunk_size": chunk_size,
        }
        try:
            response = self.client.post_blocking(self.url, json.dumps(body).encode())
        except Retryable as exc:
            raise RuntimeError(
                f"teacher server {self.url}: {exc}; check teacher.base_url and that the server "
                "is up"
            ) from exc
        if response.status >= 400:
            raise RuntimeError(
                f"teacher server {self.url} answered HTTP {response.status}: "
                f"{response.error_message()[:300]}; check teacher.base_url and the server's log"
            )
        data = response.json()
        return TeacherScores(
            torch.tensor(data["topk_ids"], dtype=torch.long).reshape(-1, k),
            torch.tensor(data["topk_logprobs"], dtype=torch.float32).reshape(-1, k),
            torch.tensor(data["sampled_logprob"], dtype=torch.float32),
        )

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()


def load_teacher_model(model_path: str, device: Any = "cpu") -> torch.nn.Module:
    """The frozen teacher in float32, eval mode, no gradients: in-process or served alike."""
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_path, dtype=torch.float32)
    linear_patch_embeddings(model)
    return model.to(device).eval().requires_grad_(False)


def create_teacher_app(model_path: str, device: str = "cpu", api_key: str | None = None) -> Any:
    """A FastAPI app scoring sequences with the checkpoint at `model_path` (frozen, float32);
    with `api_key`, every route but /health needs it as a Bearer token."""
    from fastapi import FastAPI

    model = load_teacher_model(model_path, device)
    tokenizer = HFTokenizer.from_pretrained(model_path)
    images: dict[str, Image.Image] = {}
    pixels = PixelCache(tokenizer.processor.image_processor, images.__getitem__)
    scorer = SequenceScorer(model, tokenizer, pixels)
    app = FastAPI(title="beacon OPD teacher", docs_url=None, redoc_url=None, openapi_url=None)
    if api_key is not None:
        app.add_middleware(BearerAuth, api_key=api_key)

    @app.post("/v1/score")
    def score(body: dict[str, Any]) -> dict[str, Any]:
        for item in body["images"]:
            if item["key"] not in images:
                images[item["key"]] = Image.open(io.BytesIO(base64.b64decode(item["png"])))
        encoded = EncodedTrajectory(
            "remote", body["input_ids"], body["loss_mask"], body["image_keys"]
        )
        scores = scorer.teacher_scores(encoded, int(body["k"]), int(body["chunk_size"]))
        return {
            "topk_ids": scores.topk_ids.tolist(),
            "topk_logprobs": scores.topk_logprobs.tolist(),
            "sampled_logprob": scores.sampled_logprob.tolist(),
        }

    return app
