"""RevueConfig: the paper's defaults, and every bad setting reported at once."""

from __future__ import annotations

import pytest

from beacon.config import ConfigError, load_config
from beacon.train.opd.config import ALPHA_SWEEP, OPDConfig, RevueConfig
from beacon.train.opd.revue_loss import WEIGHTINGS

from ..opd_helpers import opd_settings


def test_defaults_are_the_papers() -> None:
    cfg = RevueConfig()
    assert (cfg.k_support, cfg.alpha, cfg.lam, cfg.weighting) == (32, 0.2, 0.5, "revue")
    assert (cfg.critic_max_tool_images, cfg.critic_max_tokens) == (8, 2048)
    assert cfg.validate() == []
    assert ALPHA_SWEEP == (0.05, 0.1, 0.2, 0.5, 1.0)
    assert set(WEIGHTINGS) == {
        "revue",
        "uniform",
        "random_select",
        "mask_random",
        "mask_top",
        "mask_low",
    }


def test_bad_settings_all_reported() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(
            RevueConfig,
            overrides=["k_support=0", "alpha=0.0", "lam=1.0", "weighting=mask_middle",
                       "chunk_size=0", "reflection_source=swapped"],
        )  # fmt: skip
    problems = err.value.problems
    assert len(problems) == 6, problems
    assert any("mask_middle" in p and "mask_top" in p for p in problems)
    assert any("swapped" in p and "shuffled" in p for p in problems)


def test_a_shuffled_control_needs_a_reflection_teacher(tmp_path) -> None:
    cfg = opd_settings(tmp_path, tmp_path, tmp_path / "run", revue__reflection_source="shuffled")
    assert OPDConfig.model_validate(cfg).revue.reflection_source == "shuffled"
    assert RevueConfig().reflection_source == "own"
    cfg["teacher"]["context"] = "base"
    needs = r"reflection_source=shuffled.*teacher\.context=reflection"
    with pytest.raises(ValueError, match=needs):
        OPDConfig.model_validate(cfg)


def test_loads_through_the_project_config_loader() -> None:
    cfg = load_config(RevueConfig, overrides=["alpha=0.5", "weighting=mask_top"])
    assert (cfg.alpha, cfg.weighting) == (0.5, "mask_top")
