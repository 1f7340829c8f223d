"""The data config: shipped files validate; every problem is reported at once."""

from __future__ import annotations

import pytest

from beacon import configs
from beacon.data.config import DataConfigError, load_data_config

SHIPPED = sorted((configs.root() / "data").glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_data_configs_load(path):
    cfg = load_data_config(path)
    assert cfg.difficulty.k >= 1 and cfg.expert.engine.name == "openai"


def test_overrides_set_nested_values():
    cfg = load_data_config(None, ["difficulty.k=3", "difficulty.agent.temperature=0.7"])
    assert cfg.difficulty.k == 3 and cfg.difficulty.agent.temperature == 0.7


def test_all_problems_reported_together():
    with pytest.raises(DataConfigError) as info:
        load_data_config(None, ["difficulty.kk=3", "mix.text_share=1.5", "pool.limit=0"])
    text = str(info.value)
    assert "3 problems" in text
    assert "difficulty.kk" in text and "mix.text_share" in text and "pool.limit" in text


def test_identical_samples_are_refused_with_the_setting_to_fix():
    with pytest.raises(DataConfigError, match=r"difficulty\.agent\.temperature=1\.0"):
        load_data_config(None, ["difficulty.agent.temperature=0"])


def test_max_correct_must_leave_some_items_out():
    with pytest.raises(DataConfigError, match="max_correct"):
        load_data_config(None, ["difficulty.k=2", "difficulty.max_correct=2"])


def test_expert_must_be_a_server():
    with pytest.raises(DataConfigError, match=r"expert\.engine\.name=openai"):
        load_data_config(None, ["expert.engine.name=hf"])


def test_cli_reports_config_problems_before_loading_a_model():
    from typer.testing import CliRunner

    from beacon.cli import app

    result = CliRunner().invoke(app, ["data", "difficulty", "--set", "difficulty.kk=1"])
    assert result.exit_code == 2
    assert "difficulty.kk" in result.output


def test_an_alias_bomb_is_refused_with_the_file_named(tmp_path):
    levels = ["&l0 [" + ", ".join(["lol"] * 10) + "]"]
    levels += [f"&l{k} [" + ", ".join([f"*l{k - 1}"] * 10) + "]" for k in range(1, 6)]
    path = tmp_path / "bomb.yaml"
    path.write_text("".join(f"b{k}: {item}\n" for k, item in enumerate(levels)))
    with pytest.raises(DataConfigError, match=r"bomb.yaml: not valid YAML: its aliases expand"):
        load_data_config(path)
