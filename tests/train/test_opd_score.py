"""OPD scoring on a real rollout: hidden-state scoring equals the models' own logits, and the
conditioned teacher sequence keeps the student's completion ids with the support image inserted."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from beacon.agent.config import AgentConfig
from beacon.agent.episode import EpisodeSpec
from beacon.agent.loop import AgentLoop
from beacon.benchmarks.synth import generate
from beacon.engines.hf import HFEngine
from beacon.engines.tokenizer import HFTokenizer
from beacon.images import ImageStore
from beacon.train.core.collate import PixelCache, collate
from beacon.train.core.encode import encode_trajectory
from beacon.train.opd.revue_loss import reduce_logits
from beacon.train.opd.score import SequenceScorer, conditioned_sequence, supervised_positions


@pytest.fixture(scope="module")
def rollout(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory):
    store = ImageStore(tmp_path_factory.mktemp("opd-score") / "images")
    engine = HFEngine(tiny_model_path)
    agent = AgentConfig(temperature=1.0, top_k=50, max_new_tokens_per_turn=10, max_turns=1)
    sample = generate(0, 1)
    with AgentLoop(engine, None, agent, store=store) as loop:
        (trajectory,) = loop.run([EpisodeSpec(sample, "notool", seed=3)])
    return sample, trajectory, store, engine


def test_hidden_state_scoring_equals_full_logits(rollout) -> None:
    _sample, trajectory, store, engine = rollout
    tokenizer = HFTokenizer.from_pretrained(engine.model_path)
    encoded = encode_trajectory(trajectory, tokenizer)
    pixels = PixelCache(tokenizer.processor.image_processor, store.get)
    scorer = SequenceScorer(engine.model, tokenizer, pixels)
    positions = supervised_positions(encoded)
    assert len(positions) == encoded.num_loss_tokens == 10
    batch = collate([encoded], tokenizer.pad_token_id, tokenizer.image_token_id, pixels)
    with torch.no_grad():
        logits = engine.model(**batch.model_inputs()).logits[0, positions - 1]
    ids = torch.tensor(encoded.input_ids)[positions]
    scores = scorer.teacher_scores(encoded, k=8, chunk_size=3)
    reference = reduce_logits(logits, ids, 8)
    torch.testing.assert_close(scores.topk_logprobs, reference.topk_logprobs)
    torch.testing.assert_close(scores.sampled_logprob, reference.sampled_logprob)
    with torch.no_grad():
        student = scorer.student_scores(encoded, scores.topk_ids, chunk_size=4)
    torch.testing.assert_close(student.support_logits, logits.gather(-1, scores.topk_ids))
    full = torch.log_softmax(logits, -1)  # the health numbers, from the same hidden states
    torch.testing.assert_close(student.sampled_logprob, full.gather(-1, ids[:, None])[:, 0])
    torch.testing.assert_close(student.entropy, -(full.exp() * full).sum(-1))


def test_conditioned_sequence_inserts_support_and_keeps_completion(rollout) -> None:
    sample, trajectory, store, engine = rollout
    tokenizer = HFTokenizer.from_pretrained(engine.model_path)
    encoded = encode_trajectory(trajectory, tokenizer)
    support = store.put(Image.new("RGB", (64, 64), (200, 10, 10)))
    cond = conditioned_sequence(
        trajectory, encoded, sample, "REFLECTION TEXT", [support], tokenizer, store.get, False
    )
    assert cond.alignment.aligned
    prompt_len = len(trajectory.segments[0].token_ids)
    completion = encoded.input_ids[prompt_len:]
    assert cond.encoded.input_ids[-len(completion) :] == completion
    assert cond.encoded.images == [trajectory.segments[0].images[0], support]
    assert sum(cond.encoded.loss_mask) == encoded.num_loss_tokens
    prompt_text = tokenizer.decode(cond.encoded.input_ids[: -len(completion)])
    assert prompt_text.index("REFLECTION TEXT") > prompt_text.index(sample.question[:20])
    pixels = PixelCache(tokenizer.processor.image_processor, store.get)
    scores = SequenceScorer(engine.model, tokenizer, pixels).teacher_scores(cond.encoded, 8, 4)
    assert scores.num_positions == encoded.num_loss_tokens


def test_rebuild_mismatch_is_misaligned(rollout) -> None:
    _sample, trajectory, store, engine = rollout
    tokenizer = HFTokenizer.from_pretrained(engine.model_path)
    encoded = encode_trajectory(trajectory, tokenizer)
    other = generate(0, 2)  # another item's question: the prompt does not rebuild
    cond = conditioned_sequence(trajectory, encoded, other, "R", [], tokenizer, store.get, False)
    assert cond.encoded is None and not cond.alignment.aligned
    assert "rebuild" in cond.alignment.reason


def test_a_placeholder_trains_nothing_but_reaches_every_language_weight(
    rollout, tiny_model_path: Path
) -> None:
    """A process without trajectories to train (`loop.accumulate`) still runs the student's
    forward and backward, with a loss of weight 0: zero gradients, no gradient missing."""
    from types import SimpleNamespace

    from beacon.train.core.config import ModelConfig
    from beacon.train.core.setup import load_model
    from beacon.train.opd.config import RevueConfig
    from beacon.train.opd.step import _placeholder_loss

    tokenizer = rollout[3].tokenizer
    model = load_model(ModelConfig(path=str(tiny_model_path)))
    parts = SimpleNamespace(
        tokenizer=tokenizer,
        cfg=SimpleNamespace(revue=RevueConfig()),
        student=SequenceScorer(model, tokenizer, None),
    )
    loss = _placeholder_loss(parts, [])
    loss.backward()
    assert float(loss) == 0.0
    language = [(n, p) for n, p in model.named_parameters() if "visual" not in n]
    assert all(p.grad is not None and not p.grad.any() for _, p in language)
