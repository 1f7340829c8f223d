"""Registry lookup, option parsing and shuffling, and the `beacon bench` commands."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from beacon.benchmarks import UnknownBenchmarkError, get_benchmark, list_benchmarks
from beacon.benchmarks.options import split_options
from beacon.cli import app


def test_lookup_is_forgiving_about_case_and_dashes() -> None:
    assert get_benchmark("HRBench-4K").name == "hrbench_4k"


def test_unknown_name_lists_known_ones_and_suggests() -> None:
    with pytest.raises(UnknownBenchmarkError) as caught:
        get_benchmark("mathvsta")
    message = str(caught.value)
    assert "Did you mean mathvista" in message and "synth" in message
    assert isinstance(caught.value, KeyError)


@pytest.mark.parametrize(
    ("text", "stem", "options"),
    [
        (
            "Which is it?\nOptions: A: The cat, on a mat., B: A dog, C: None",
            "Which is it?",
            {"A": "The cat, on a mat.", "B": "A dog", "C": "None"},
        ),
        ("Find x.\nChoices:\nA:40°\nB:60°", "Find x.", {"A": "40°", "B": "60°"}),
        ("What share?\na) 10\nb) 20", "What share?", {"A": "10", "B": "20"}),
        ("Pick one\n(A) red\n(B) blue", "Pick one", {"A": "red", "B": "blue"}),
    ],
)
def test_split_options_reads_each_published_style(text: str, stem: str, options: dict) -> None:
    assert split_options(text) == (stem, options)


def test_split_options_leaves_plain_sentences_alone() -> None:
    text = "A square is tangent to a line.\nB. is not an option list on its own"
    assert split_options(text) == (text, None)


def test_vstar_shuffle_is_seeded_recorded_and_keeps_the_gold(local_copy) -> None:
    bench = get_benchmark("vstar")
    path = local_copy("vstar")
    by_seed = {seed: list(bench.load(path=path, seed=seed)) for seed in range(6)}
    assert [s.options for s in by_seed[1]] == [s.options for s in bench.load(path=path, seed=1)]
    golds = set()
    for samples in by_seed.values():
        for sample in samples:
            order = sample.metadata["option_permutation"]
            assert sample.metadata["original_answer"] == "A"
            assert order[list(sample.options).index(sample.answer)] == "A"
            gold_text = {"0": "white", "1": "glass", "2": "left"}[sample.id]
            assert sample.options[sample.answer] == gold_text
            golds.add(sample.answer)
    assert len(golds) > 1, "published labels are all A; shuffling must move the gold"


def test_cli_list_names_every_benchmark() -> None:
    result = CliRunner().invoke(app, ["bench", "list"])
    assert result.exit_code == 0, result.output
    for name in list_benchmarks():
        assert name in result.output


def test_cli_show_prints_samples_and_saves_images(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["bench", "show", "synth", "--limit", "2", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert "synth/0" in result.output and "answer:" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["synth_0_0.png", "synth_1_0.png"]


def test_cli_show_unknown_benchmark_fails_with_the_names() -> None:
    result = CliRunner().invoke(app, ["bench", "show", "nosuch"])
    assert result.exit_code != 0
    assert "unknown benchmark" in result.output


def test_cli_show_bad_path_says_what_failed(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "show", "mathvista", "--path", str(tmp_path)])
    assert result.exit_code == 1
    assert "mathvista could not be loaded" in result.output and "testmini.json" in result.output
