"""`beacon.engines.weights`: a push is checked whole, and the hf engine copies nothing of a bad
one (issue 40)."""

from __future__ import annotations

import pytest
import torch

from beacon.engines.weights import push_size_limit, weight_problems, weight_specs


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(5, 3), torch.nn.Linear(3, 2))


@pytest.mark.parametrize(
    ("tensors", "found"),
    [
        ({"0.weight": torch.zeros(5, 3)}, []),
        ({"0.weight": torch.tensor([float("nan")])}, ["shape [1], expected [5, 3]"]),
        ({"0.weight": torch.full((5, 3), float("nan"))}, ["NaN or infinite"]),
        ({"1.bias": torch.tensor([0.0, float("-inf")])}, ["NaN or infinite"]),
        ({"2.weight": torch.zeros(1)}, ["not a weight of this model"]),
        ({"1.bias": torch.zeros(2, dtype=torch.int64)}, ["is torch.int64, expected torch.float32"]),
    ],
)
def test_weight_problems_names_each_one(tensors, found):
    problems = weight_problems(tensors, weight_specs(_model()), exact_dtype=False)
    assert len(problems) == len(found)
    assert all(text in problem for text, problem in zip(found, problems, strict=True))


def test_another_float_precision_passes_only_when_dtypes_need_not_match():
    specs, push = weight_specs(_model()), {"1.bias": torch.zeros(2, dtype=torch.bfloat16)}
    assert weight_problems(push, specs, exact_dtype=False) == []
    assert weight_problems(push, specs, exact_dtype=True) == [
        "'1.bias' is torch.bfloat16, expected torch.float32"
    ]


def test_the_size_limit_admits_the_models_own_state_dict():
    from beacon.engines.weights import weights_payload

    for model in (_model(), torch.nn.Linear(1000, 300)):
        payload = weights_payload(model.state_dict())
        assert len(payload) <= push_size_limit(weight_specs(model))


def test_hf_engine_copies_nothing_of_a_push_with_a_problem(tiny_dir):
    from beacon.engines.hf import HFEngine

    engine = HFEngine(tiny_dir("qwen2_vl"), batch_size=1)
    before = {k: v.clone() for k, v in engine.model.state_dict().items()}
    names = list(before)
    push = {name: torch.zeros_like(before[name]) for name in names[:3]}
    push[names[3]] = torch.tensor([float("nan")])  # would broadcast over the whole tensor
    with pytest.raises(ValueError, match="no weight changed"):
        engine.load_weights(push)
    after = engine.model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())
    push[names[3]] = torch.zeros_like(before[names[3]])
    assert engine.load_weights(push) == 4
    assert all(torch.equal(engine.model.state_dict()[n], push[n]) for n in push)
    engine.close()
