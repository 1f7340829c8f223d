"""Training layout and HGCE's prompt swap: hinted-old and un-hinted-new log-probs in the ratio."""

from __future__ import annotations

import pytest
import torch

from beacon.train.core.encode import (
    align_old_logprobs,
    token_logprobs,
    training_sequence,
    without_hint,
)
from beacon.train.grpo.policy import importance_ratio
from beacon.types import Segment, Trajectory


def _segments() -> list[Segment]:
    return [
        Segment(role="generated", text="a<code>", token_ids=[10, 11], logprobs=[-0.1, -0.2]),
        Segment(role="observation", text="<so>", token_ids=[12, 13, 14]),
        Segment(role="generated", text="<answer>", token_ids=[15], logprobs=[-0.3]),
    ]


def test_plain_trajectory_trains_on_what_was_sampled() -> None:
    prompt = Segment(role="prompt", text="q", token_ids=[1, 2, 3])
    traj = Trajectory(sample_id="s", mode="tool", format="thyme", segments=[prompt, *_segments()])
    seq = training_sequence(traj)
    assert seq.token_ids == seq.sampling_ids == [1, 2, 3, 10, 11, 12, 13, 14, 15]
    assert seq.loss_mask == [0, 0, 0, 1, 1, 0, 0, 0, 1]
    assert seq.sampler_logprobs == [0, 0, 0, -0.1, -0.2, 0, 0, 0, -0.3]
    assert seq.prompt_length == seq.sampling_prompt_length == 3
    assert not seq.hinted and seq.response_length == 6


def test_hinted_trajectory_swaps_in_the_original_prompt() -> None:
    hinted = Segment(role="prompt", text="q + hint", token_ids=[1, 2, 3, 7, 8], images=["img"])
    original = Segment(role="prompt", text="q", token_ids=[1, 2, 3], images=["img"])
    traj = Trajectory(
        sample_id="s",
        mode="hinted",
        format="thyme",
        segments=[hinted, *_segments()],
        original_prompt=original,
        hint="zoom",
    )
    seq = training_sequence(traj)
    assert seq.hinted
    assert seq.token_ids == [1, 2, 3, 10, 11, 12, 13, 14, 15]
    assert seq.sampling_ids == [1, 2, 3, 7, 8, 10, 11, 12, 13, 14, 15]
    assert seq.loss_mask == [0, 0, 0, 1, 1, 0, 0, 0, 1]
    assert (seq.prompt_length, seq.sampling_prompt_length) == (3, 5)
    # the sampler's log-probs (taken after the hinted prompt) land on the response positions
    assert seq.sampler_logprobs == [0, 0, 0, -0.1, -0.2, 0, 0, 0, -0.3]
    assert seq.images == ["img"]
    # log-probs over the sampling ids move by the prompt-length difference
    over_sampling = torch.arange(11, dtype=torch.float64)
    aligned = align_old_logprobs(over_sampling, seq)
    assert aligned.tolist() == [0, 0, 0, 5, 6, 7, 8, 9, 10]


def test_without_hint_puts_the_original_prompt_in_front() -> None:
    hinted = Segment(role="prompt", text="q + hint", token_ids=[1, 2, 3, 7, 8])
    original = Segment(role="prompt", text="q", token_ids=[1, 2, 3])
    traj = Trajectory(
        sample_id="s",
        mode="hinted",
        format="thyme",
        segments=[hinted, *_segments()],
        original_prompt=original,
        hint="zoom",
    )
    plain = without_hint(traj)
    assert plain.mode == "tool" and plain.original_prompt is None and plain.hint == "zoom"
    assert plain.token_ids == training_sequence(traj).token_ids
    assert plain.loss_mask == training_sequence(traj).loss_mask
    assert traj.segments[0] is hinted  # the hinted record is untouched
    assert without_hint(plain) is plain
    with pytest.raises(ValueError, match="no original_prompt"):
        without_hint(Trajectory(sample_id="s", mode="hinted", format="thyme", segments=[hinted]))


def test_missing_sampler_logprobs_give_none() -> None:
    prompt = Segment(role="prompt", text="q", token_ids=[1])
    gen = Segment(role="generated", text="x", token_ids=[5, 6])
    traj = Trajectory(sample_id="s", mode="tool", format="thyme", segments=[prompt, gen])
    assert training_sequence(traj).sampler_logprobs is None


def test_unusable_trajectories_are_refused() -> None:
    prompt = Segment(role="prompt", text="q", token_ids=[1])
    hinted = Trajectory(sample_id="s", mode="hinted", format="thyme", segments=[prompt])
    with pytest.raises(ValueError, match="no original_prompt"):
        training_sequence(hinted)
    text_only = Trajectory(
        sample_id="s",
        mode="tool",
        format="thyme",
        segments=[Segment(role="prompt", text="q"), Segment(role="generated", text="a")],
    )
    with pytest.raises(ValueError, match="no token ids"):
        training_sequence(text_only)
    with pytest.raises(ValueError, match="prompt segment"):
        training_sequence(Trajectory(sample_id="s", mode="tool", format="thyme"))


def test_align_checks_the_length() -> None:
    prompt = Segment(role="prompt", text="q", token_ids=[1])
    traj = Trajectory(sample_id="s", mode="tool", format="thyme", segments=[prompt, *_segments()])
    with pytest.raises(ValueError, match="sampling_ids"):
        align_old_logprobs(torch.zeros(3), training_sequence(traj))


def test_token_logprobs_against_log_softmax() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 9, generator=gen, dtype=torch.float64)
    ids = torch.randint(0, 9, (2, 5), generator=gen)
    out = token_logprobs(logits, ids, temperature=0.7)
    for b in range(2):
        assert out[b, 0] == 0
        for t in range(1, 5):
            expected = torch.log_softmax(logits[b, t - 1] / 0.7, dim=-1)[ids[b, t]]
            assert out[b, t].item() == pytest.approx(expected.item(), abs=1e-12)


@pytest.mark.slow
def test_hgce_ratio_with_the_tiny_model(tiny_lm) -> None:
    """Old log-probs from the hinted prompt, new from the original: checked token by token."""
    tok, model = tiny_lm.tokenizer, tiny_lm.model
    question = "How many dots are in the picture?"
    original_ids = tiny_lm.prompt(question)
    hinted_ids = tiny_lm.prompt(question + "\nHint: crop the left half and count rows.")
    gen1 = tok.encode("crop <code>c(1)</code>")
    obs = tok.encode("<sandbox_output>1</sandbox_output>")
    gen2 = tok.encode("so <answer>3</answer>")
    response = gen1 + obs + gen2

    generated = [1] * len(gen1) + [0] * len(obs) + [1] * len(gen2)

    def direct(prefix: list[int]) -> list[float]:
        """log p(token | everything before it), one fresh forward per generated token."""
        out = []
        for j in range(len(response)):
            if not generated[j]:
                out.append(0.0)
                continue
            ids = torch.tensor([prefix + response[:j]])
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, -1]
            out.append(torch.log_softmax(logits, -1)[response[j]].item())
        return out

    lp_hinted, lp_original = direct(hinted_ids), direct(original_ids)
    n1, n2 = len(gen1), len(obs)
    sampler = lp_hinted[:n1], lp_hinted[n1 + n2 :]  # what a T = 1 sampler would have reported
    traj = Trajectory(
        sample_id="s",
        mode="hinted",
        format="thyme",
        segments=[
            Segment(role="prompt", text="hinted", token_ids=hinted_ids),
            Segment(role="generated", text="g1", token_ids=gen1, logprobs=list(sampler[0])),
            Segment(role="observation", text="o", token_ids=obs),
            Segment(role="generated", text="g2", token_ids=gen2, logprobs=list(sampler[1])),
        ],
        original_prompt=Segment(role="prompt", text="original", token_ids=original_ids),
    )
    seq = training_sequence(traj)
    with torch.no_grad():
        new = token_logprobs(
            model(input_ids=torch.tensor([seq.token_ids])).logits, torch.tensor([seq.token_ids])
        )[0]
        over_sampling = token_logprobs(
            model(input_ids=torch.tensor([seq.sampling_ids])).logits,
            torch.tensor([seq.sampling_ids]),
        )[0]
    old = align_old_logprobs(over_sampling, seq)
    # Tolerance 1e-6, not 1e-12: the model runs in float64 but its rotary frequencies stay float32,
    # so forwards over different lengths (one full pass vs one pass per token) differ at ~1e-7.
    mask = torch.tensor(seq.loss_mask)
    # the recomputed old log-probs equal the sampler's on every generated token
    assert torch.allclose(
        old[mask.bool()],
        torch.tensor(seq.sampler_logprobs, dtype=torch.float64)[mask.bool()],
        rtol=0.0,
        atol=1e-6,
    )
    ratio = importance_ratio(new, old, mask)
    start = seq.prompt_length
    assert seq.loss_mask[start:] == generated
    for j, on in enumerate(generated):
        expected = torch.tensor(lp_original[j] - lp_hinted[j]).exp().item() if on else 1.0
        assert ratio[start + j].item() == pytest.approx(expected, rel=1e-6)
    assert ratio[mask.bool()].sub(1).abs().max() > 1e-4  # the hint really changed the policy
