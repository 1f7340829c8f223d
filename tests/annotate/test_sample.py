"""`beacon annotate sample`: balanced, seeded, joined with the critic, self-contained."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from beacon.annotate.records import load_rows
from beacon.annotate.sample import question_from_prompt, sample_run
from beacon.cli import app
from beacon.images import ImageStore

from .helpers import chart, trajectory

K = 4
PATTERNS = {"all_correct": [1, 1, 1, 1], "mixed": [1, 0, 0, 1], "all_wrong": [0, 0, 0, 0]}


def make_run(run: Path, per_type: int = 5) -> None:
    """An eval run folder by hand: tool and notool records, trajectories, images."""
    store = ImageStore(run / "images")
    samples, trajectories = [], []
    item = 0
    for pattern in PATTERNS.values():
        for _ in range(per_type):
            image = chart(item)
            image_key, crop_key = store.put(image), store.put(image.crop((0, 0, 100, 100)))
            for mode in ("tool", "notool"):
                for k, correct in enumerate(pattern):
                    key = f"synth/{item}/{mode}/{k}"
                    traj = trajectory(str(item), "7" if correct else "3", crop_key, image_key)
                    samples.append(
                        {"key": key, "benchmark": "synth", "sample_id": str(item), "mode": mode,
                         "k": k, "correct": bool(correct), "prediction": traj.final_answer,
                         "answer": "7"}
                    )  # fmt: skip
                    trajectories.append({"key": key, "trajectory": json.loads(traj.to_json())})
            item += 1
    for name, rows in (("samples.jsonl", samples), ("trajectories.jsonl", trajectories)):
        (run / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_balanced_seeded_and_self_contained(tmp_path: Path) -> None:
    make_run(tmp_path / "run")
    critic = tmp_path / "critic.jsonl"
    critic.write_text(
        json.dumps({"group_id": "synth/5/tool", "rollout_diagnoses": [
            {"rollout_id": k, "stage": "CORRECT" if c else "READ", "discrepancy": "d"}
            for k, c in enumerate(PATTERNS["mixed"])]}) + "\n"
        + "".join(json.dumps({"group_id": f"synth/{i}/tool", "rollout_id": k, "stage": "ACQUIRE"})
                  + "\n" for i in range(10, 15) for k in range(K))
    )  # fmt: skip
    out = tmp_path / "set" / "sample.jsonl"
    rows = sample_run(tmp_path / "run", out, per_group_type=3, seed=1, critic_path=critic)
    again = sample_run(tmp_path / "run", tmp_path / "again.jsonl", per_group_type=3, seed=1)
    other = sample_run(tmp_path / "run", tmp_path / "other.jsonl", per_group_type=3, seed=2)
    assert [r["id"] for r in rows] == [r["id"] for r in again] != [r["id"] for r in other]
    assert Counter(r["group_type"] for r in rows) == {"all_correct": 3, "mixed": 3, "all_wrong": 3}
    assert len({r["group_id"] for r in rows}) == 9 and all("/tool/" in r["id"] for r in rows)
    for row in rows:
        item = int(row["group_id"].split("/")[1])
        assert row["group_type"] == list(PATTERNS)[item // 5]
        assert row["correct"] == bool(PATTERNS[row["group_type"]][row["rollout_id"]])
        critic_stage = (row["critic"] or {}).get("stage")
        if row["group_type"] == "all_wrong":
            assert critic_stage == "ACQUIRE"
        elif row["group_id"] == "synth/5/tool":
            assert critic_stage == ("CORRECT" if row["correct"] else "READ")
    loaded = load_rows(out)  # the written file is a valid annotation file...
    assert loaded[0].question == "How many bars are taller than 60 pixels?"
    for row in loaded:  # ...whose images all lie beside it
        assert all((out.parent / p).exists() for p in row.images)
        keys = [k for s in row.parsed_trajectory().segments for k in s.images]
        assert all(ImageStore(out.parent / "images").path(k).exists() for k in keys)


def test_short_run_takes_what_there_is(tmp_path: Path, caplog) -> None:
    make_run(tmp_path / "run", per_type=2)
    rows = sample_run(tmp_path / "run", tmp_path / "s.jsonl", per_group_type=32, per_group=2)
    assert len(rows) == 3 * 2 * 2
    assert "only 2 mixed groups in the run, 32 asked for" in caplog.text


def test_bad_inputs_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="pass the output folder of `beacon eval`"):
        sample_run(tmp_path, tmp_path / "s.jsonl")
    make_run(tmp_path / "run", per_type=1)
    bad = tmp_path / "critic.jsonl"
    bad.write_text(json.dumps({"rollout": 1}) + "\n")
    with pytest.raises(ValueError, match="line 1 is not a critic row"):
        sample_run(tmp_path / "run", tmp_path / "s.jsonl", critic_path=bad)


def test_a_crafted_image_key_neither_reads_nor_writes_outside_the_stores(
    tmp_path: Path, caplog
) -> None:
    """Image keys come from the run's trajectories.jsonl: a `../` key is left out, not copied
    from outside the run's store (tmp/x/) to outside the sample's (tmp/set/x/)."""
    make_run(tmp_path / "run", per_type=1)
    key = "../x/secret"
    secret = ImageStore(tmp_path / "run" / "images").path(key).resolve()
    assert secret == tmp_path / "x" / "secret.png"
    secret.parent.mkdir()
    secret.write_bytes(b"not yours")
    lines = (tmp_path / "run" / "trajectories.jsonl").read_text()
    crop = json.loads(lines.splitlines()[0])["trajectory"]["segments"][3]["images"][0]
    (tmp_path / "run" / "trajectories.jsonl").write_text(lines.replace(crop, key))
    out = tmp_path / "set" / "deeper" / "sample.jsonl"
    sample_run(tmp_path / "run", out, per_group_type=1)
    target = ImageStore(out.parent / "images").path(key).resolve()
    assert target == tmp_path / "set" / "x" / "secret.png" and not target.parent.exists()
    assert "outside the dataset root" in caplog.text


def test_question_from_prompt() -> None:
    prompt = (
        "<|im_start|>system\nTools...<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|>"
        '<|vision_end|>What is the code?\n(A) 1\n\n### User Image Path: "/mnt/x.png"\n'
        '### User Image Size: "8x8"<|im_end|>\n<|im_start|>assistant\n'
    )
    assert question_from_prompt(prompt) == "What is the code?\n(A) 1"
    assert question_from_prompt("plain question") == "plain question"


@pytest.mark.slow
def test_cli_samples_a_real_eval_run(tmp_path: Path, tiny_model_path: Path) -> None:
    run = tmp_path / "run"
    settings = [
        "samples=2",
        "agent.temperature=1.0",
        "agent.max_new_tokens_per_turn=16",
        "agent.max_total_new_tokens=16",
        "bootstrap=20",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "beacon.cli", "eval", "--bench", "synth", "--modes", "tool",
         "--limit", "2", "--out", str(run), "--concurrency", "1", "--no-progress",
         *[arg for s in settings for arg in ("--set", s)]],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = CliRunner().invoke(app, ["annotate", "sample", str(run), "--per-group-type", "2"])
    assert result.exit_code == 0, result.output
    rows = load_rows(run / "annotate" / "sample.jsonl")
    assert rows and rows[0].question.startswith("What") and rows[0].images
    assert "label them: beacon annotate" in result.output
    again = CliRunner().invoke(app, ["annotate", "sample", str(run)])
    assert again.exit_code == 1 and "pass --force" in again.output
