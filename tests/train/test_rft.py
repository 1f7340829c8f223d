"""`beacon train rft` end to end on CPU: the data pipeline's scripted synth expert as the teacher
(over real HTTP, made wrong on odd items so the filter has something to drop), the tiny student,
the real agent loop, sandbox and verifier. Only verified trajectories are trained on, the counts
are recorded, a rerun is a no-op, a run killed with SIGKILL mid-sampling resumes to the same SFT
losses, and a resume with other settings is refused, naming the keys."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from beacon.agent.formats import ANSWER_CLOSE
from beacon.data.scripted_expert import (
    MODEL_NAME,
    ScriptedSynthExpert,
    create_scripted_app,
    first_image,
)
from beacon.engines.scripted_server import ChatReply
from beacon.engines.serve import ServerHandle, run_app_in_thread
from beacon.errors import UserError
from beacon.runfolder import RunFolderMismatch
from beacon.train.core.metrics import read_metrics
from beacon.train.rft import run_rft
from beacon.train.rft.config import RFTConfig

SRC = Path(__file__).resolve().parents[2] / "src"
POOL = 4  # synth items 0..3 of seed 0
M = 2  # teacher attempts per item
WRONG = "none"  # verified wrong for every synth category


class HalfRightExpert(ScriptedSynthExpert):
    """The scripted expert (crop, read, answer), but answering `WRONG` on odd items; counts its
    requests, so a test can tell which episodes ran again."""

    def __init__(self) -> None:
        super().__init__(seed=0, count=POOL)
        self.requests = 0

    def reply(self, messages: list[dict[str, Any]]) -> ChatReply:
        self.requests += 1
        reply = super().reply(messages)
        odd = int(self.identify(first_image(messages)).id) % 2
        if odd and reply.stop_reason == ANSWER_CLOSE:
            return ChatReply(reply.text.rsplit("<answer>", 1)[0] + "<answer>" + WRONG, ANSWER_CLOSE)
        return reply


@dataclass
class Teacher:
    expert: HalfRightExpert
    server: ServerHandle


def start_teacher(delay_s: float = 0.0) -> Teacher:
    expert = HalfRightExpert()
    return Teacher(expert, run_app_in_thread(create_scripted_app(expert, delay_s=delay_s)))


def settings(student: Path, base_url: str, out: Path) -> dict[str, Any]:
    """POOL items x M attempts of the served teacher, then 3 SFT steps of 2 trajectories."""
    engine = {"name": "openai", "model": MODEL_NAME, "base_url": base_url, "max_retries": 0}
    return {
        "model": {"path": str(student)},
        "teacher": {"engine": engine},
        "data": {"benchmark": "synth", "limit": POOL},
        "rollout": {"group_size": M, "batch_size": 2},
        "train": {
            "output_dir": str(out),
            "max_steps": 3,
            "global_batch_size": 2,
            "lr": 1e-3,
            "save_every": 1,
            "progress_bar": False,
        },
    }


def rft(student: Path, teacher: Teacher, out: Path, resume: bool = False) -> dict[str, Any]:
    cfg = RFTConfig.model_validate(settings(student, teacher.server.base_url, out))
    return run_rft(cfg, resume=resume)


def records(out: Path) -> list[dict[str, Any]]:
    lines = (out / "teacher" / "samples.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def verified(out: Path) -> list[dict[str, Any]]:
    lines = (out / "verified" / "trajectories.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def teacher() -> Iterator[Teacher]:
    started = start_teacher()
    yield started
    started.server.stop()


@pytest.fixture(scope="module")
def reference(
    tiny_model_path: Path, teacher: Teacher, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """One uninterrupted run (1 torch thread, as the conftest's autouse fixture sets)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("rft") / "run"
    rft(tiny_model_path, teacher, out)
    torch.set_num_threads(threads)
    return out


def test_rft_trains_only_on_verified_trajectories(reference: Path) -> None:
    summary = json.loads((reference / "summary.json").read_text())
    assert list(summary) == ["sample", "verify", "sft"]
    assert summary["sample"]["total"] == summary["sample"]["kept"] == POOL * M
    assert summary["sample"]["extra"]["accuracy"] == 0.5
    assert summary["verify"]["total"] == POOL * M
    assert summary["verify"]["kept"] == POOL * M // 2
    assert summary["verify"]["dropped"] == {"wrong_answer": POOL * M // 2}
    assert summary["verify"]["extra"]["items_with_a_verified_trajectory"] == POOL // 2

    correct = sorted(r["key"] for r in records(reference) if r["correct"])
    kept = [t["metadata"]["eval_key"] for t in verified(reference)]
    assert kept == correct  # exactly the verified episodes, in key order
    assert {key.split("/")[1] for key in kept} == {"0", "2"}  # the items the teacher got right
    for traj in verified(reference):
        assert traj["tool_calls"] and traj["metadata"]["source"] == "teacher"

    sft = yaml.safe_load((reference / "sft" / "config.yaml").read_text())
    assert sft["data"]["train"] == [str(reference / "verified" / "trajectories.jsonl")]
    assert json.loads((reference / "sft" / "data.json").read_text())["trajectories"] == len(kept)
    assert summary["sft"]["total"] == summary["sft"]["kept"] == len(kept)
    assert summary["sft"]["dropped"] == {} and summary["sft"]["extra"]["steps"] == 3
    metrics = read_metrics(reference / "sft" / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3] and metrics[0]["loss"] > 0
    assert (reference / "sft" / "checkpoint-3" / "COMPLETE").exists()


def test_rft_rerun_is_a_noop_and_other_settings_are_refused(
    tiny_model_path: Path, teacher: Teacher, reference: Path
) -> None:
    before = {p: p.read_bytes() for p in reference.rglob("*.json*")}
    requests = teacher.expert.requests
    rft(tiny_model_path, teacher, reference, resume=True)
    assert teacher.expert.requests == requests  # no episode sampled again
    assert {p: p.read_bytes() for p in reference.rglob("*.json*")} == before
    assert not (reference / "sft" / "checkpoint-4").exists()

    with pytest.raises(RunFolderMismatch, match="--resume"):
        rft(tiny_model_path, teacher, reference)
    other = settings(tiny_model_path, teacher.server.base_url, reference)
    other["rollout"]["group_size"] = 3
    other["filter"] = {"require_tool": True}
    with pytest.raises(RunFolderMismatch, match=r"filter\.require_tool.*rollout\.group_size"):
        run_rft(RFTConfig.model_validate(other), resume=True)
    moved = settings(tiny_model_path, "http://127.0.0.1:9/v1", reference)
    run_rft(RFTConfig.model_validate(moved), resume=True)  # a server address is operational


def settled_requests(expert: HalfRightExpert) -> int:
    """The request count once requests sent just before a kill have all arrived."""
    while True:
        count = expert.requests
        time.sleep(0.3)
        if expert.requests == count:
            return count


def committed_lines(path: Path) -> int:
    """Records a killed writer finished (a torn last line has no newline yet)."""
    text = path.read_text() if path.exists() else ""
    return sum(1 for line in text.split("\n")[:-1] if line.strip())


def test_rft_killed_while_sampling_resumes_to_the_same_training(
    tiny_model_path: Path, reference: Path, tmp_path: Path
) -> None:
    slow = start_teacher(delay_s=0.3)
    try:
        out = tmp_path / "run"
        cfg_file = tmp_path / "rft.yaml"
        cfg_file.write_text(yaml.safe_dump(settings(tiny_model_path, slow.server.base_url, out)))
        env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "beacon", "train", "rft", "--config", str(cfg_file)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        samples = out / "teacher" / "samples.jsonl"
        deadline = time.monotonic() + 240
        while committed_lines(samples) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "no episode recorded"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        done = committed_lines(samples)
        assert done < POOL * M and not (out / "summary.json").exists()

        requests = settled_requests(slow.expert)
        rft(tiny_model_path, slow, out, resume=True)
        assert slow.expert.requests - requests == 2 * (POOL * M - done)  # 2 turns per episode
    finally:
        slow.server.stop()
    got, ref = (json.loads((d / "summary.json").read_text()) for d in (out, reference))
    for stage in ("sample", "verify", "sft"):
        for key in ("total", "kept", "dropped"):
            assert got[stage][key] == ref[stage][key], (stage, key)
    keys = [[t["metadata"]["eval_key"] for t in verified(d)] for d in (out, reference)]
    assert keys[0] == keys[1]
    metrics = [read_metrics(d / "sft" / "metrics.jsonl") for d in (out, reference)]
    losses = [[m["loss"] for m in run] for run in metrics]
    assert losses[0] == losses[1]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("accelerate") is None, reason="accelerate CLI not installed")
def test_rft_on_two_processes_repeats_the_one_process_run(
    tiny_model_path: Path, teacher: Teacher, reference: Path, tmp_path: Path
) -> None:
    """Under `accelerate launch` the main process samples and verifies while the other waits,
    then both train the SFT stage on half the batch each: the same data, counts and losses."""
    out = tmp_path / "run"
    cfg_file = tmp_path / "rft.yaml"
    cfg_file.write_text(yaml.safe_dump(settings(tiny_model_path, teacher.server.base_url, out)))
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    command = [shutil.which("accelerate"), "launch", "--cpu", "--num_processes", "2"]
    command += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    command += ["-m", "beacon", "train", "rft", "--config", str(cfg_file)]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got, ref = (json.loads((d / "summary.json").read_text()) for d in (out, reference))
    for stage in ("sample", "verify", "sft"):
        for key in ("total", "kept", "dropped"):
            assert got[stage][key] == ref[stage][key], (stage, key)
    rows = [
        [(t["metadata"]["eval_key"], t["segments"]) for t in verified(d)] for d in (out, reference)
    ]
    assert rows[0] == rows[1]
    two, one = (read_metrics(d / "sft" / "metrics.jsonl") for d in (out, reference))
    assert [m["step"] for m in two] == [1, 2, 3]
    for a, b in zip(one, two, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)


def test_rft_with_a_teacher_that_is_never_right_says_so(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    """The in-process hf teacher (random tiny weights): every episode is dropped, the verify
    counts are recorded, and the SFT stage refuses with the fix instead of training on nothing."""
    cfg = settings(tiny_model_path, "unused", tmp_path / "run")
    cfg["teacher"] = {"path": str(tiny_model_path)}
    cfg["data"]["limit"] = 1
    cfg["rollout"]["agent"] = {
        "temperature": 1.0,
        "max_new_tokens_per_turn": 8,
        "max_total_new_tokens": 8,
    }
    with pytest.raises(UserError, match=r"0 of 2 teacher episodes verified.*rollout\.group_size"):
        run_rft(RFTConfig.model_validate(cfg))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["verify"]["kept"] == 0 and sum(summary["verify"]["dropped"].values()) == 2
    assert "sft" not in summary


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"teacher": {}}, "exactly one of teacher.path"),
        ({"rollout": {"group_size": 4, "agent": {"temperature": 0.0}}}, "identical"),
    ],
)
def test_rft_config_names_bad_settings(change: dict, message: str) -> None:
    cfg = settings(Path("student"), "http://127.0.0.1:9/v1", Path("out"))
    cfg.update(change)
    with pytest.raises(ValueError, match=message):
        RFTConfig.model_validate(cfg)


def test_rft_refuses_a_missing_student_before_sampling(tmp_path: Path) -> None:
    cfg = settings(tmp_path / "no-student", "http://127.0.0.1:9/v1", tmp_path / "run")
    with pytest.raises(UserError, match=r"model\.path=.*beacon tiny make"):
        run_rft(RFTConfig.model_validate(cfg))
    assert not (tmp_path / "run").exists()
