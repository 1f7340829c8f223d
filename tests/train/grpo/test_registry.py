"""Contract over every registered reward, and the rl config."""

from __future__ import annotations

import math

import pytest
from pydantic import BaseModel, ValidationError

from beacon.train.core.outcomes import GroupOutcomes
from beacon.train.grpo.config import RLConfig
from beacon.train.grpo.rewards import REWARDS, get_reward

GROUPS = [
    GroupOutcomes.of([True, False, True, False], [False, False, True, True], label="easy"),
    GroupOutcomes.of([False, False], [True, True], [True, False], label="hard"),
    GroupOutcomes.of([True], [True], label="hard"),
]


@pytest.mark.parametrize("name", sorted(REWARDS))
def test_every_reward_gives_one_finite_value_per_response(name: str) -> None:
    for group in GROUPS:
        rewards = get_reward(name)(group, RLConfig(reward=name))
        assert len(rewards) == group.size
        assert all(isinstance(r, float) and math.isfinite(r) for r in rewards)


@pytest.mark.parametrize("name", sorted(REWARDS))
def test_every_reward_prefers_correct_over_wrong_in_the_same_mode(name: str) -> None:
    group = GroupOutcomes.of([True, False], [True, True], label="hard")
    right, wrong = get_reward(name)(group, RLConfig(reward=name))
    assert right > wrong


def test_registry_holds_the_three_variants() -> None:
    assert {"naar", "binary", "blog"} <= set(REWARDS)


def test_unknown_reward_is_a_config_error() -> None:
    with pytest.raises(ValidationError, match=r"rl\.reward='naar2'"):
        RLConfig(reward="naar2")
    with pytest.raises(ValueError, match="unknown reward"):
        get_reward("naar2")


def test_unknown_key_is_rejected() -> None:
    with pytest.raises(ValidationError, match="code_rewrd"):
        RLConfig(naar={"code_rewrd": 0.3})


def test_out_of_range_values_are_rejected() -> None:
    with pytest.raises(ValidationError):
        RLConfig(format_weight=1.5)
    with pytest.raises(ValidationError):
        RLConfig(loss={"aggregation": "sum"})


def _fields(model: type[BaseModel], prefix: str = "rl"):
    for name, info in model.model_fields.items():
        yield f"{prefix}.{name}", info
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _fields(annotation, f"{prefix}.{name}")


def test_every_setting_is_documented_and_strict() -> None:
    for path, info in _fields(RLConfig):
        assert info.description, f"{path} has no Field(description=...)"
    for model in (RLConfig, *(type(v) for v in RLConfig().__dict__.values())):
        if isinstance(model, type) and issubclass(model, BaseModel):
            assert model.model_config.get("extra") == "forbid", model


def test_nested_override_by_dotted_path_shape() -> None:
    # what `--set rl.naar.code_reward=0.5` turns into after the YAML merge
    config = RLConfig.model_validate({"naar": {"code_reward": 0.5}, "loss": {"kl_coef": 0.01}})
    assert config.naar.code_reward == 0.5 and config.loss.kl_coef == 0.01
    assert config.loss.aggregation == "sequence_mean" and config.filter.rule == "adaptive"
