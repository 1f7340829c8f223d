"""beacon.configs: the shipped configs by name (`beacon configs list|cp`, `--config NAME`), and
`--show-config` on every command that takes a config."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from accelerate.commands.config.config_args import load_config_from_file
from typer.testing import CliRunner

from beacon import configs
from beacon.cli import app, main
from beacon.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def run_main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`beacon ARGS` through the command line's one error path: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exit_:
        main(args)
    out, err = capsys.readouterr()
    return int(exit_.value.code), out, err


def test_names_are_unique_across_folders() -> None:
    files = sorted(configs.root().rglob("*.yaml"))
    assert len({p.stem for p in files}) == len(files), [
        p.relative_to(configs.root()) for p in files
    ]
    assert {c.kind for c in configs.shipped().values()} == {"eval", "data", "train", "accelerate"}


@pytest.mark.parametrize(
    "path", sorted((configs.root() / "accelerate").glob("*.yaml")), ids=lambda p: p.stem
)
def test_accelerate_configs_load_as_accelerate_reads_them(path: Path) -> None:
    """accelerate's own loader builds a dataclass from the file: an unknown key would raise."""
    assert load_config_from_file(str(path)).num_processes >= 1


def test_list_shows_every_name_with_what_it_is_for() -> None:
    result = runner.invoke(app, ["configs", "list"])
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line for line in result.output.splitlines()}
    assert set(lines) == set(configs.shipped())
    assert "GRPO + NAAR + HGCE" in lines["grpo_tiny"] and " train " in lines["grpo_tiny"]


def test_cp_copies_the_file_and_never_overwrites(tmp_path: Path) -> None:
    result = runner.invoke(app, ["configs", "cp", "grpo_tiny", str(tmp_path)])
    assert result.exit_code == 0, result.output
    copied = tmp_path / "grpo_tiny.yaml"
    assert copied.read_bytes() == configs.config_path("grpo_tiny").read_bytes()
    assert result.output.strip() == str(copied)
    named = tmp_path / "sub" / "mine.yaml"
    assert runner.invoke(app, ["configs", "cp", "sft_tiny.yaml", str(named)]).exit_code == 0
    assert named.read_bytes() == configs.config_path("sft_tiny").read_bytes()
    copied.write_text("edited\n")
    again = runner.invoke(app, ["configs", "cp", "grpo_tiny", str(tmp_path)])
    assert isinstance(again.exception, UserError) and "exists" in str(again.exception)
    assert copied.read_text() == "edited\n"


def test_an_unknown_name_is_one_line_with_the_closest_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run_main(["train", "grpo", "--config", "grpo_tiyn"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "did you mean grpo_tiny?" in err and "sft_tiny" in err and "beacon configs list" in err
    code, _, err = run_main(["configs", "cp", "configs/train/grpo_tiny.yaml"], capsys)
    assert code == 2 and "did you mean grpo_tiny?" in err


def test_config_takes_a_name_and_a_file_that_exists_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    shown = runner.invoke(app, ["train", "grpo", "--config", "grpo_tiny", "--show-config"])
    assert shown.exit_code == 0, shown.output
    assert re.search(r"^train\.output_dir +str +\"runs/grpo-tiny\" ", shown.output, re.M)
    (tmp_path / "grpo_tiny").write_text("model: {path: tiny}\ntrain: {output_dir: runs/local}\n")
    local = runner.invoke(app, ["train", "grpo", "--config", "grpo_tiny", "--show-config"])
    assert re.search(r"^train\.output_dir +str +\"runs/local\" ", local.output, re.M), local.output


@pytest.mark.parametrize(
    ("command", "name", "key"),
    [
        ("train sft", "sft_tiny", "train.global_batch_size +int +8 "),
        ("train grpo", "grpo_tiny", "rollout.group_size +int +4 "),
        ("train opd", "opd_tiny", "revue.k_support +int +32 "),
        ("train rft", "rft_tiny_scripted", "rollout.agent.max_new_tokens_per_turn +int +512 "),
        ("data difficulty", "synth_tiny", "pool.limit +int \\| null +20 "),
        ("data expert", "synth_tiny", "expert.engine.base_url +.*8011"),
        ("data hints", "synth_tiny", 'out +str +"runs/data_synth" '),
        ("eval", "eval_synth", "limit +int \\| null +20 "),
    ],
)
def test_show_config_lists_the_resolved_settings(command: str, name: str, key: str) -> None:
    """Every command that takes a config lists it resolved (the file's value, then --set's),
    through the one table `beacon.config.format_describe` prints."""
    args = [*command.split(), "--config", name, "--show-config"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.output.split()[:4] == ["setting", "type", "value", "help"]
    assert re.search(f"^{key}", result.output, re.M), result.output
    out = runner.invoke(app, [*args, "--set", "out=elsewhere"]).output
    if command.startswith("data"):  # --set applies on top of the file
        assert re.search(r"^out +str +\"elsewhere\" ", out, re.M), out


def test_train_without_a_config_shows_the_defaults_and_refuses_to_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shown = runner.invoke(app, ["train", "sft", "--show-config"])
    assert shown.exit_code == 0 and shown.output.split()[:4] == [
        "setting",
        "type",
        "default",
        "help",
    ]
    assert re.search(r"^model\.path +str +\(required\) ", shown.output, re.M), shown.output
    code, _, err = run_main(["train", "sft"], capsys)
    assert code == 2 and "needs --config" in err and "--config sft_tiny" in err


def test_docs_name_only_shipped_configs() -> None:
    """Every `--config NAME` / `-c NAME` in the README and docs (a name: no folder, no suffix,
    not a placeholder such as NAME) is a shipped config, so the docs' commands work from an empty
    folder after a wheel install."""
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = {
        (path.name, match)
        for path in texts
        for match in re.findall(r"(?:--config|-c) ([\w./-]+)", path.read_text())
        if not re.search(r"[/.]", match) and not match.isupper()
    }
    assert named, "the docs name no shipped config"
    assert {name for _, name in named} <= set(configs.shipped()), sorted(named)
