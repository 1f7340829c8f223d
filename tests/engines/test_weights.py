"""`beacon.engines.weights`: a push is checked whole, and the hf engine copies nothing of a bad
one (issue 40); a push in several chunks is assembled whole or not at all (issue 49)."""

from __future__ import annotations

import pytest
import torch

from beacon.engines.weights import (
    ChunkId,
    PushAssembler,
    WeightSpec,
    cast_for,
    chunk_names,
    push_size_limit,
    specs_from_json,
    specs_json,
    weight_problems,
    weight_specs,
)


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


# --- chunked pushes (issue 49) ----------------------------------------------------------------


def _chunks(model: torch.nn.Module, push: str = "p") -> list[tuple[ChunkId, dict]]:
    """The model's state dict + 1 as three chunks, one tensor each ([0.weight], [1.weight],
    [1.bias]), in push order."""
    state = {k: v + 1 for k, v in model.state_dict().items()}
    names = chunk_names(state, chunk_bytes=1)
    return [
        (ChunkId(push, i, len(names)), {n: state[n] for n in run}) for i, run in enumerate(names)
    ]


def test_chunk_names_bounds_each_body_and_keeps_order():
    tensors = {
        "a": torch.zeros(10),
        "b": torch.zeros(10),
        "c": torch.zeros(30),
        "d": torch.zeros(1),
    }
    assert chunk_names(tensors, chunk_bytes=80) == [["a", "b"], ["c"], ["d"]]  # c alone: 120 B
    assert chunk_names(tensors, chunk_bytes=1 << 20) == [["a", "b", "c", "d"]]
    assert chunk_names({}, chunk_bytes=80) == [[]]


def test_a_push_is_whole_only_when_its_last_chunk_arrived():
    chunks = _chunks(_model())
    assembler = PushAssembler(weight_specs(_model()))
    assert [assembler.add(*c) for c in chunks[:-1]] == [None, None]
    complete = assembler.add(*chunks[-1])
    assert sorted(complete) == ["0.weight", "1.bias", "1.weight"]
    assert assembler.staged == {} and assembler.push is None


def test_a_new_push_discards_an_unfinished_one():
    """A trainer that crashed after chunk 1 of 3 and pushes again: the old chunks never reach
    the model, and a late chunk of the old push is refused."""
    assembler = PushAssembler(weight_specs(_model()))
    old, new = _chunks(_model(), "old"), _chunks(_model(), "new")
    assembler.add(*old[0])
    assert assembler.add(*new[0]) is None
    with pytest.raises(ValueError, match="send the push again from chunk 0"):
        assembler.add(*old[1])
    assert assembler.staged == {}


@pytest.mark.parametrize("problem", ["nan", "twice", "skipped", "total", "range"])
def test_a_bad_chunk_refuses_the_whole_push(problem):
    chunks = _chunks(_model())
    assembler = PushAssembler(weight_specs(_model()))
    assembler.add(*chunks[0])
    chunk, tensors = chunks[1]
    if problem == "nan":
        tensors = {name: torch.full_like(t, float("nan")) for name, t in tensors.items()}
    elif problem == "twice":
        tensors = {**tensors, **chunks[0][1]}
    elif problem == "skipped":
        chunk, tensors = chunks[2]
    elif problem == "total":
        chunk = ChunkId(chunk.push, chunk.index, chunk.total + 1)
    else:
        chunk = ChunkId(chunk.push, 3, 3)
    with pytest.raises(ValueError, match="refused"):
        assembler.add(chunk, tensors)
    assert assembler.staged == {} and assembler.push is None
    with pytest.raises(ValueError, match="from chunk 0"):  # the rest of the push is refused too
        assembler.add(*chunks[2])


def test_cast_for_gives_each_tensor_the_servers_dtype():
    specs = {"w": WeightSpec((2,), torch.bfloat16), "ids": WeightSpec((2,), torch.int64)}
    state = {"w": torch.tensor([1.0 / 3, 2.0]), "ids": torch.tensor([1, 2]), "x": torch.ones(1)}
    out = cast_for(state, specs)
    assert out["w"].dtype == torch.bfloat16 and torch.equal(out["w"], state["w"].bfloat16())
    assert out["ids"].dtype == torch.int64 and out["x"].dtype == torch.float32


def test_the_weight_list_round_trips_and_malformed_ones_are_refused():
    specs = weight_specs(_model().to(torch.bfloat16))
    assert specs_from_json(specs_json(specs)) == specs
    for bad in ({}, {"weights": {"a": {"shape": [1], "dtype": "Tensor"}}}, {"weights": [1]}):
        with pytest.raises(ValueError, match="malformed"):
            specs_from_json(bad)
