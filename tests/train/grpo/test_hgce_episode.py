"""A real hinted episode (tiny model, real sandbox) through the rl layout and a training forward.

The boundary test: the agent records the hinted and the original prompt, the engine records
log-probs, and `training_sequence` + `align_old_logprobs` must put them where a training forward
over the same ids (with the same images) computes them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from beacon.agent.config import AgentConfig
from beacon.agent.episode import EpisodeSpec
from beacon.agent.loop import AgentLoop
from beacon.engines.hf import HFEngine
from beacon.images import ImageStore
from beacon.sandbox import Sandbox
from beacon.train.core.encode import align_old_logprobs, token_logprobs, training_sequence
from beacon.train.core.outcomes import format_check
from beacon.train.grpo.policy import importance_ratio
from beacon.types import Sample

TURNS = (
    "Zoom. <code>\n```python\nimage.crop((0, 0, 40, 30)).show()\n```\n</code>",
    "So <answer>B</answer>",
)


def _forward_logprobs(engine: HFEngine, ids: list[int], images: list[Image.Image]) -> torch.Tensor:
    """Training-side log-probs at T = 1: one forward over `ids` with `images` in order."""
    tok = engine.tokenizer
    input_ids = torch.tensor([ids])
    pixels = tok.processor.image_processor(images=images, return_tensors="pt")
    with torch.no_grad():
        logits = engine.model(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            pixel_values=pixels["pixel_values"].to(engine.model.dtype),
            image_grid_thw=pixels["image_grid_thw"],
            mm_token_type_ids=(input_ids == tok.image_token_id).to(torch.int),
        ).logits
    return token_logprobs(logits, input_ids)[0]


@pytest.mark.slow
def test_hinted_episode_trains_without_the_hint(
    tiny_model_path: Path, tmp_path: Path, turn_script: type
) -> None:
    engine = HFEngine(tiny_model_path, batch_size=1)
    tok = engine.tokenizer
    turns = [tok.encode(t) for t in TURNS]
    turns[-1] = [*turns[-1], *tok.eos_token_ids[-1:]]
    engine.logits_processors = [turn_script(turns, tok.encode("</sandbox_output>")[0])]
    store = ImageStore(tmp_path / "images")
    sample = Sample(
        id="s", images=[Image.new("RGB", (96, 64), (200, 30, 30))], question="?", answer="B"
    )
    spec = EpisodeSpec(sample, mode="hinted", hint="Crop the top-left corner first.")
    with (
        Sandbox() as sandbox,
        AgentLoop(engine, sandbox, AgentConfig(max_new_tokens_per_turn=64), store=store) as loop,
    ):
        (traj,) = loop.run([spec])
    assert traj.finish_reason == "answer" and format_check(traj).ok, format_check(traj)

    seq = training_sequence(traj)
    assert seq.hinted and seq.token_ids[: seq.prompt_length] == traj.original_prompt.token_ids
    assert seq.sampling_ids[: seq.sampling_prompt_length] == traj.segments[0].token_ids
    assert seq.token_ids[seq.prompt_length :] == seq.sampling_ids[seq.sampling_prompt_length :]
    images = [store.get(key) for key in seq.images]
    assert len(images) == 2  # the question's image, then the crop

    old = align_old_logprobs(_forward_logprobs(engine, seq.sampling_ids, images), seq)
    new = _forward_logprobs(engine, seq.token_ids, images)
    mask = torch.tensor(seq.loss_mask)
    on = mask.bool()
    sampler = torch.tensor(seq.sampler_logprobs)
    # The engine's log-probs (raw logits, T = 1, with a KV cache) sit where the hinted forward
    # puts them; float32 with a KV cache vs one full forward differ at ~5e-6, hence 1e-4.
    assert torch.allclose(old[on], sampler[on], rtol=0.0, atol=1e-4)
    ratio = importance_ratio(new, old, mask)
    assert torch.allclose(ratio[on], (new - old)[on].exp())
    assert (ratio[on] - 1).abs().max() > 1e-4  # the hint changed the policy's probabilities
