"""`beacon train opd` end to end on CPU: tiny student and teacher (different seeds), synth, the
scripted critic over local HTTP; killed with SIGKILL and resumed to the same numbers; variants
and faults (critic down, re-encoding mismatch) that must not stop the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from safetensors.torch import load_file

from beacon import configs
from beacon.train.core.metrics import read_metrics
from beacon.train.opd import run_opd
from beacon.train.opd.config import OPDConfig

from .opd_helpers import opd_settings as settings

SRC = Path(__file__).resolve().parents[2] / "src"


def test_opd_killed_and_resumed_matches_uninterrupted(
    tiny_model_path: Path, teacher_path: Path, tmp_path: Path
) -> None:
    reference = tmp_path / "reference"
    run_opd(OPDConfig.model_validate(settings(tiny_model_path, teacher_path, reference)))
    ref = read_metrics(reference / "metrics.jsonl")
    assert [m["step"] for m in ref] == [1, 2]
    assert ref[0]["coverage_diagnosis_only"] + ref[0]["coverage_complete"] == 8
    assert ref[0]["target_reflected"] == 8 and ref[0]["impact_sparsity"] > 0.2
    critic_log = (reference / "critic.jsonl").read_text().splitlines()
    assert len(critic_log) == 4 and json.loads(critic_log[0])["error"] is None

    killed = tmp_path / "killed"
    cfg_file = tmp_path / "opd.yaml"
    cfg_file.write_text(yaml.safe_dump(settings(tiny_model_path, teacher_path, killed)))
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "beacon", "train", "opd", "--config", str(cfg_file)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    while not (killed / "checkpoint-1" / "COMPLETE").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint-1 written"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed_cfg = OPDConfig.model_validate(settings(tiny_model_path, teacher_path, killed))
    run_opd(resumed_cfg, resume=True)
    got = read_metrics(killed / "metrics.jsonl")
    assert [m["step"] for m in got] == [1, 2]
    for key in ("loss", "grad_norm", "impact_sparsity", "loss_tokens", "coverage_diagnosis_only"):
        assert [m[key] for m in got] == [m[key] for m in ref], key
    a = load_file(reference / "checkpoint-2" / "model.safetensors")
    b = load_file(killed / "checkpoint-2" / "model.safetensors")
    assert all((a[k] == b[k]).all() for k in a)
    records = [json.loads(line) for line in (killed / "revue.jsonl").read_text().splitlines()]
    assert sorted({r["step"] for r in records}) == [1, 2] and len(records) == 16


@pytest.mark.parametrize(
    ("sets", "expect"),
    [
        ({"teacher__context": "base", "revue__weighting": "uniform"}, {"target_no_reflection": 8}),
        (  # a random model's sampled byte fragments rarely re-encode to the same ids
            {"teacher__context": "gt", "teacher__reencode_check": True},
            {"target_misaligned": 7, "target_reflected": 1},
        ),
        (
            {
                "critic__kind": "http",
                "critic__base_url": "http://127.0.0.1:9/v1",
                "revue__weighting": "mask_top",
            },
            {"coverage_missing": 8, "critic_groups_missing": 2},
        ),
    ],
    ids=["vanilla_opd", "gt_teacher_reencode_mismatch", "critic_down"],
)
def test_opd_variants_and_faults_keep_training(
    tiny_model_path: Path, teacher_path: Path, tmp_path: Path, sets: dict, expect: dict
) -> None:
    cfg = settings(tiny_model_path, teacher_path, tmp_path / "run", **sets)
    cfg["train"]["max_steps"] = 1
    state = run_opd(OPDConfig.model_validate(cfg))
    assert state.step == 1
    (metrics,) = read_metrics(tmp_path / "run" / "metrics.jsonl")
    for key, value in expect.items():
        assert metrics[key] == value, key
    assert metrics["retained"] == 8 and metrics["loss"] > 0


def test_opd_config_names_bad_settings(tiny_model_path: Path) -> None:
    cfg = settings(tiny_model_path, tiny_model_path, Path("x"), teacher__context="oracle")
    with pytest.raises(ValueError, match=r"teacher\.context"):
        OPDConfig.model_validate(cfg)


def test_opd_critic_is_the_one_the_config_names(tiny_model_path: Path) -> None:
    """A reflection teacher needs a critic: the config names an endpoint or the scripted one;
    neither, or both, is refused before anything loads. Base and gt teachers need none."""
    cfg = settings(tiny_model_path, tiny_model_path, Path("x"))
    cfg["critic"] = {}
    with pytest.raises(
        ValueError, match=r"needs a critic.*critic\.base_url.*critic\.kind=scripted"
    ):
        OPDConfig.model_validate(cfg)
    cfg["critic"] = {"kind": "scripted", "base_url": "http://127.0.0.1:9/v1"}
    with pytest.raises(ValueError, match=r"critic\.kind=scripted.*critic\.base_url"):
        OPDConfig.model_validate(cfg)
    cfg["critic"] = {"base_url": "http://127.0.0.1:9/v1"}
    assert OPDConfig.model_validate(cfg).critic.kind == "http"
    base = settings(tiny_model_path, tiny_model_path, Path("x"), teacher__context="base")
    base["critic"] = {}
    assert OPDConfig.model_validate(base).critic.base_url is None


def test_opd_scripted_student_gets_complete_reflections(
    tiny_model_path: Path, teacher_path: Path, tmp_path: Path, turn_script
) -> None:
    """A student forced to crop the evidence and answer right: all-correct groups, complete
    reflections anchored at its crop (the item is hard: the full view is not sufficient), tool
    calls counted, and its canonical tokens re-encode."""
    from beacon.benchmarks.synth import generate

    item = generate(0, 0)
    x0, y0, x1, y1 = item.metadata["region"]
    crop = f"image.crop(({x0 - 8}, {y0 - 8}, {x1 + 8}, {y1 + 8})).show()"
    turns = [f"Zoom. <code>\n```python\n{crop}\n```\n</code>", f"So <answer>{item.answer}</answer>"]

    def scripted_student(tok: Any) -> list[Any]:
        ids = [tok.encode(t) for t in turns]
        ids[-1] = [*ids[-1], *tok.eos_token_ids[-1:]]
        return [turn_script(ids, tok.encode("</sandbox_output>")[0])]

    cfg = settings(tiny_model_path, teacher_path, tmp_path / "run", teacher__reencode_check=True)
    cfg["data"]["limit"] = 1
    cfg["train"]["max_steps"] = 1
    cfg["rollout"]["agent"].update(max_new_tokens_per_turn=120, max_total_new_tokens=240)
    run_opd(OPDConfig.model_validate(cfg), logits_processors=scripted_student)
    (metrics,) = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert metrics["accuracy"] == 1.0 and metrics["tool_call_rate"] == 1.0
    assert metrics["coverage_complete"] == 8 and metrics["stage_CORRECT"] == 8
    assert metrics["target_reflected"] == 8 and metrics["impact_sparsity"] is not None


def test_opd_teacher_over_http_equals_in_process(
    tiny_model_path: Path, teacher_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """teacher.base_url: the same run with the teacher behind /v1/score gives the same numbers;
    the teacher server wants an API key, which the client reads from teacher.api_key_env."""
    import httpx

    from beacon.engines.serve import run_app_in_thread
    from beacon.train.opd.teacher_server import create_teacher_app

    local = settings(tiny_model_path, teacher_path, tmp_path / "local")
    local["train"]["max_steps"] = 1
    run_opd(OPDConfig.model_validate(local))
    handle = run_app_in_thread(create_teacher_app(str(teacher_path), api_key="teacher-key"))
    monkeypatch.setenv("TEACHER_KEY", "teacher-key")
    try:
        assert httpx.post(f"{handle.base_url}/score", json={}).status_code == 401
        remote = settings(tiny_model_path, teacher_path, tmp_path / "remote")
        remote["train"]["max_steps"] = 1
        remote["teacher"]["base_url"] = handle.base_url
        remote["teacher"]["api_key_env"] = "TEACHER_KEY"
        run_opd(OPDConfig.model_validate(remote))
    finally:
        handle.stop()
    (a,) = read_metrics(tmp_path / "local" / "metrics.jsonl")
    (b,) = read_metrics(tmp_path / "remote" / "metrics.jsonl")
    for key in ("loss", "grad_norm", "impact_sparsity", "coverage_diagnosis_only"):
        assert a[key] == b[key], key


def test_opd_one_supervised_token_trains_with_uniform_weights(
    tiny_model_path: Path, teacher_path: Path, tmp_path: Path
) -> None:
    cfg = settings(tiny_model_path, teacher_path, tmp_path / "run")
    cfg["train"]["max_steps"] = 1
    cfg["rollout"]["agent"].update(max_turns=1, max_new_tokens_per_turn=1, max_total_new_tokens=1)
    run_opd(OPDConfig.model_validate(cfg))
    (metrics,) = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert metrics["retained"] == 8 and metrics["loss_tokens"] == 8
    assert metrics["weights_too_short"] == 8 and "weights_grouped" not in metrics  # |T| < 2


@pytest.mark.parametrize(
    "path", sorted((configs.root() / "train").glob("opd*.yaml")), ids=lambda p: p.name
)
def test_shipped_opd_configs_validate(path: Path) -> None:
    from beacon.config import load_config

    cfg = load_config(OPDConfig, path, ["revue.alpha=0.05", "teacher.context=base"])
    assert isinstance(cfg, OPDConfig) and cfg.revue.alpha == 0.05


def test_one_tokenizer_handle_serves_student_teacher_and_their_engines(
    tiny_model_path: Path, teacher_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The student's tokenizer and processor are loaded once and shared by its engine, the
    teacher's scoring and the teacher check's engine; the teacher's own is loaded once more,
    only to compare the vocabularies."""
    from beacon.engines.tokenizer import HFTokenizer

    loaded: list[str] = []
    load = HFTokenizer.from_pretrained.__func__

    def counted(cls: type, path: Any, *args: Any, **kwargs: Any) -> Any:
        loaded.append(str(path))
        return load(cls, path, *args, **kwargs)

    monkeypatch.setattr(HFTokenizer, "from_pretrained", classmethod(counted))
    cfg = settings(tiny_model_path, teacher_path, tmp_path / "run")
    cfg["train"]["max_steps"] = 1
    cfg["teacher_check"] = {"enabled": True, "items": 1, "on_fail": "warn"}
    run_opd(OPDConfig.model_validate(cfg))
    assert (tmp_path / "run" / "teacher_check.json").exists()  # the teacher's engine ran
    assert sorted(loaded) == sorted([str(tiny_model_path), str(teacher_path)])


@pytest.mark.parametrize("section", ["critic", "teacher"])
def test_a_named_key_variable_that_is_unset_stops_the_run(
    tiny_model_path: Path, teacher_path: Path, tmp_path: Path, section: str
) -> None:
    """A key the config opts into but the environment lacks is an error naming the setting, not
    401s that the critic's fallback would hide (ReVuE silently becoming vanilla OPD)."""
    from beacon.errors import UserError

    cfg = settings(tiny_model_path, teacher_path, tmp_path / "run")
    cfg[section] |= {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "BEACON_UNSET_TEST_KEY"}
    if section == "critic":
        cfg["critic"]["kind"] = "http"
    with pytest.raises(UserError, match=rf"{section}\.api_key_env='BEACON_UNSET_TEST_KEY'"):
        run_opd(OPDConfig.model_validate(cfg))
