"""One GRPO update on the tiny model moves probability toward the positive-advantage response."""

from __future__ import annotations

import pytest
import torch

from beacon.train.core.encode import token_logprobs, training_sequence
from beacon.train.grpo.policy import grpo_loss
from beacon.types import Segment, Trajectory


@pytest.mark.slow
def test_update_sign_on_the_tiny_model(tiny_lm) -> None:
    tok, model = tiny_lm.tokenizer, tiny_lm.model
    prompt = tiny_lm.prompt("What is 2+1?")
    responses = [tok.encode("<answer>3</answer>"), tok.encode("Let me think <answer>4</answer>")]
    trajectories = [
        Trajectory(
            sample_id="s",
            mode="tool",
            format="thyme",
            segments=[
                Segment(role="prompt", text="p", token_ids=prompt),
                Segment(role="generated", text="r", token_ids=ids),
            ],
        )
        for ids in responses
    ]
    seqs = [training_sequence(t) for t in trajectories]
    width = max(len(s.token_ids) for s in seqs)
    pad = lambda rows: torch.tensor([r + [0] * (width - len(r)) for r in rows])  # noqa: E731
    input_ids = pad([s.token_ids for s in seqs])  # right padding: masks need no offsets
    attention = pad([[1] * len(s.token_ids) for s in seqs])
    loss_mask = pad([s.loss_mask for s in seqs])

    def sequence_logp() -> torch.Tensor:
        logits = model(input_ids=input_ids, attention_mask=attention).logits
        return token_logprobs(logits, input_ids)

    with torch.no_grad():
        old = sequence_logp()
    before = (old * loss_mask).sum(1)
    out = grpo_loss(sequence_logp(), old, torch.tensor([1.0, -1.0]), loss_mask)
    assert out.ratio_mean.item() == pytest.approx(1.0) and out.clip_frac.item() == 0.0
    out.loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:  # the vision tower gets none: no image in this prompt
                p -= 1e-3 * p.grad
        after = (sequence_logp() * loss_mask).sum(1)
    assert after[0] > before[0] and after[1] < before[1]
