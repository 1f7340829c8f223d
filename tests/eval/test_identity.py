"""Run identity: the resolved config minus EvalConfig.OPERATIONAL_KEYS decides what may resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from beacon.config import config_class_for, load_config
from beacon.eval.config import EvalConfig
from beacon.runfolder import RunFolderMismatch, check_run_folder


def cfg(*overrides: str) -> EvalConfig:
    return load_config(EvalConfig, overrides=list(overrides))


def check(folder: Path, config: EvalConfig) -> str:
    """The check `beacon eval` makes before it adds to a run folder."""
    return check_run_folder(folder, config, EvalConfig.OPERATIONAL_KEYS, folder_setting="--out")


def test_operational_changes_resume(tmp_path: Path) -> None:
    first = check(tmp_path, cfg())
    again = check(
        tmp_path, cfg("concurrency=64", "limit=5", "engine.batch_size=2", "sandbox.num_workers=1")
    )
    assert first == again


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["sandbox.timeout_s=2"], "sandbox.timeout_s: 10.0 -> 2.0"),
        (["judge.model=gpt"], 'judge.model: null -> "gpt"'),
        (["agent.temperature=0.5"], "agent.temperature: 0.0 -> 0.5"),
        (["sandbox.repair=null"], 'sandbox.repair.min_crop_size: 4 -> "(unset)"'),
    ],
)
def test_result_changing_settings_refuse_a_resume_naming_the_keys(
    tmp_path: Path, overrides: list[str], named: str
) -> None:
    check(tmp_path, cfg())
    with pytest.raises(RunFolderMismatch) as info:
        check(tmp_path, cfg(*overrides))
    assert named in str(info.value) and "--out" in str(info.value)


def test_written_config_names_its_model_and_loads_back(tmp_path: Path) -> None:
    original = cfg("agent.max_turns=3", "benchmarks=[synth]")
    check(tmp_path, original)
    path = tmp_path / "config.yaml"
    assert config_class_for(path) is EvalConfig
    assert load_config(EvalConfig, path=path) == original
    assert "# run identity: sha256:" in path.read_text()


def test_a_setting_added_later_at_its_default_resumes(tmp_path: Path) -> None:
    """A folder written before `agent.max_images` existed: at its default the run is the same
    run; set to anything else it is not."""
    import yaml

    def written_without_the_setting() -> None:
        path = tmp_path / "config.yaml"
        stored = yaml.safe_load(path.read_text())
        del stored["agent"]["max_images"]
        path.write_text(yaml.safe_dump(stored))

    check(tmp_path, cfg())
    written_without_the_setting()
    check(tmp_path, cfg())
    written_without_the_setting()
    with pytest.raises(RunFolderMismatch, match=r'agent\.max_images: "\(unset\)" -> 3'):
        check(tmp_path, cfg("agent.max_images=3"))


def test_a_folder_whose_config_holds_an_api_key_resumes_and_loses_it(tmp_path: Path) -> None:
    """`api_key` is no setting; a config.yaml that holds one (null, or a key) still resumes,
    and the rewritten file holds no key. A config file with `api_key: null` still loads."""
    import yaml

    check(tmp_path, cfg())
    path = tmp_path / "config.yaml"
    stored = yaml.safe_load(path.read_text())
    stored["engine"]["api_key"] = "sk-stored-0f3c"
    stored["judge"]["api_key"] = None
    path.write_text(yaml.safe_dump(stored))
    check(tmp_path, cfg())
    assert "api_key:" not in path.read_text().replace("api_key_env:", "")
    stored["engine"]["api_key"] = None
    path.write_text(yaml.safe_dump(stored))
    assert load_config(EvalConfig, path=path) == cfg()
