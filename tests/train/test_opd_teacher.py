"""OPD's teacher check and its no-signal control, end to end on CPU.

The teachers are the tiny model fine-tuned to answer the synth items (an oracle engine answers
through the real agent loop; SFT on those trajectories): after 4 steps it is a weak model, after
24 a strong one. The check stops a run whose teacher equals the student, passes a stronger one,
and reports (or refuses) a conditioned teacher whose context hurts it. With teacher = student
the loss is float noise and a run must not move: its optimizer steps are skipped.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from beacon.agent.config import AgentConfig
from beacon.agent.loop import AgentLoop
from beacon.benchmarks import get_benchmark
from beacon.data.scripted_expert import ScriptedSynthExpert
from beacon.engines.base import GenerationResult
from beacon.engines.tokenizer import message_images
from beacon.errors import UserError
from beacon.images import ImageStore
from beacon.rollout import episode_spec
from beacon.sandbox import Sandbox
from beacon.train.core.metrics import read_metrics
from beacon.train.opd import OPDConfig, run_opd
from beacon.train.opd.probe import CHECK_FILE, ContextEffect, TeacherCheck, coordinate_mask
from beacon.train.sft import SFTConfig, run_sft
from beacon.types import Segment, Trajectory

from .opd_helpers import opd_settings

ITEMS = 4


class OracleEngine:
    """Answers each synth item right, first turn, read off its image (no model)."""

    name = "oracle"
    tokenizer = None

    def __init__(self) -> None:
        self.expert = ScriptedSynthExpert(seed=0, count=ITEMS)

    def generate(self, requests: list[Any]) -> list[GenerationResult]:
        out = []
        for request in requests:
            sample = self.expert.identify(message_images(request.messages)[0])
            text = f"<answer>{sample.answer}</answer>"
            out.append(GenerationResult(text=text, stop_reason="</answer>"))
        return out

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def tuned(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SFT run folder with checkpoint-4 (weak) ... checkpoint-24 (strong) on the oracle's
    answers to synth items 0-3 (tool-mode prompts, as OPD's rollouts see them)."""
    root = tmp_path_factory.mktemp("tuned")
    store = ImageStore(root / "images")
    bench = get_benchmark("synth")
    specs = [episode_spec(bench, s, "tool", 0, 0) for s in bench.load(limit=ITEMS, seed=0)]
    with Sandbox() as sandbox, AgentLoop(OracleEngine(), sandbox, AgentConfig(), store) as loop:
        trajectories = loop.run(specs)
    assert all(t.finish_reason == "answer" for t in trajectories)
    (root / "oracle.jsonl").write_text("".join(t.to_json() + "\n" for t in trajectories))
    train = {"output_dir": str(root / "sft"), "max_steps": 24, "global_batch_size": ITEMS}
    train.update(lr=5e-3, min_lr_ratio=1.0, save_every=4, keep_last=10, progress_bar=False)
    cfg = {
        "model": {"path": str(tiny_model_path)},
        "data": {"train": [str(root / "oracle.jsonl")], "images": str(root / "images")},
        "train": train,
    }
    run_sft(SFTConfig.model_validate(cfg))
    return root / "sft"


def checked(student: Path, teacher: Path, out: Path, **check: Any) -> dict[str, Any]:
    """One OPD step's config with the teacher check on the pool's 4 items."""
    cfg = opd_settings(student, teacher, out, teacher__context=check.pop("context", "base"))
    cfg["teacher_check"] = {"enabled": True, "items": ITEMS, **check}
    cfg["train"]["max_steps"] = 1
    return cfg


def read_check(out: Path) -> TeacherCheck:
    return TeacherCheck.model_validate_json((out / CHECK_FILE).read_text())


@pytest.mark.slow
def test_a_teacher_equal_to_the_student_stops_the_run_before_step_1(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    cfg = OPDConfig.model_validate(checked(tiny_model_path, tiny_model_path, out))
    with pytest.raises(UserError, match=r"not better.*teacher_check\.on_fail=warn"):
        run_opd(cfg)
    check = read_check(out)
    assert check.teacher_accuracy == check.student_accuracy  # same weights, same seeds
    assert not check.better(cfg.teacher_check.min_logprob_gain)
    assert not list(out.glob("checkpoint-*")) and not (out / "metrics.jsonl").exists()
    warned = checked(tiny_model_path, tiny_model_path, out, on_fail="warn")
    assert run_opd(OPDConfig.model_validate(warned), resume=True).step == 1  # read back


@pytest.mark.slow
def test_a_stronger_teacher_passes(tuned: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_opd(OPDConfig.model_validate(checked(tuned / "checkpoint-4", tuned / "checkpoint-24", out)))
    check = read_check(out)
    assert check.teacher_accuracy is not None and check.teacher_accuracy > check.student_accuracy
    assert [m["step"] for m in read_metrics(out / "metrics.jsonl")] == [1]


@pytest.mark.slow
def test_a_context_that_hurts_the_teacher_is_reported_then_refused(
    tuned: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The tuned teacher never saw a reflection: in its prompt one lowers its log-prob of the
    student's correct answers, the failure that made the demo's ReVuE students worse."""
    out = tmp_path / "run"
    settings = checked(tuned / "checkpoint-8", tuned / "checkpoint-24", out, context="reflection")
    with caplog.at_level(logging.WARNING, logger="beacon.train.opd.probe"):
        run_opd(OPDConfig.model_validate(settings))
    effect = read_check(out).context
    assert effect is not None and effect.tokens > 0 and effect.hurts(0.01)
    assert effect.conditioned < effect.base
    assert "context lowers its log-prob" in caplog.text
    settings["teacher_check"]["on_context_hurts"] = "error"
    with pytest.raises(UserError, match=r"context lowers.*on_context_hurts=warn"):
        run_opd(OPDConfig.model_validate(settings), resume=True)


@pytest.mark.slow
def test_a_shuffled_control_whose_context_hurts_only_warns(
    tuned: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The content control reads other items' reflections: a context that hurts is expected
    there, so even on_context_hurts=error trains on, with the measurement in the log."""
    out = tmp_path / "run"
    settings = checked(tuned / "checkpoint-8", tuned / "checkpoint-24", out, context="reflection")
    settings["teacher_check"]["on_context_hurts"] = "error"
    settings["revue"]["reflection_source"] = "shuffled"
    with caplog.at_level(logging.WARNING, logger="beacon.train.opd.probe"):
        run_opd(OPDConfig.model_validate(settings))
    effect = read_check(out).context
    assert effect is not None and effect.hurts(0.01)
    assert "reflection_source=shuffled" in caplog.text and "context lowers" in caplog.text
    (metrics,) = read_metrics(out / "metrics.jsonl")
    assert metrics["revue/shuffled"] == 1


def test_accuracy_decides_first_then_the_logprob_gain() -> None:
    def check(teacher: float | None, student: float, gain: float | None) -> TeacherCheck:
        logprob = None if gain is None else -1.0
        return TeacherCheck(
            items=4,
            rollouts=16,
            correct_rollouts=4,
            correct_tokens=20,
            student_accuracy=student,
            teacher_accuracy=teacher,
            student_logprob=logprob,
            teacher_logprob=None if gain is None else -1.0 + gain,
        )

    assert check(0.9, 0.25, -2.0).better(1e-3)  # stronger, though it writes answers otherwise
    assert not check(0.25, 0.9, +1.0).better(1e-3)
    assert check(0.5, 0.5, 0.01).better(1e-3) and not check(0.5, 0.5, 0.0).better(1e-3)
    assert check(None, 0.5, 0.01).better(1e-3)  # a teacher server: no accuracy of its own
    assert not check(0.0, 0.0, None).better(1e-3)  # nothing correct to score, not more accurate

    def effect(conditioned: float, coordinate: float | None) -> ContextEffect:
        return ContextEffect(
            tokens=10,
            base=-0.1,
            conditioned=conditioned,
            coordinate_tokens=0 if coordinate is None else 3,
            coordinate_base=None if coordinate is None else -0.1,
            coordinate_conditioned=coordinate,
        )

    assert effect(-0.2, None).hurts(0.01) and not effect(-0.05, None).hurts(0.01)
    assert effect(-0.05, -1.0).hurts(0.01) and not effect(-0.05, -0.05).hurts(0.01)  # coordinates
    assert not effect(-0.105, None).hurts(0.01) and effect(-0.105, None).hurts(0.0)  # tolerance


def test_coordinate_tokens_are_the_digits_written_in_code(tiny_tokenizer: Any) -> None:
    def segment(role: str, text: str, kind: str = "text") -> Segment:
        ids = tiny_tokenizer.encode(text)
        return Segment(role, text, ids, loss_mask=[1] * len(ids), kind=kind)

    traj = Trajectory("s", "tool", "thyme")
    traj.segments = [
        segment("prompt", "user: crop 12 please"),
        segment("generated", "I crop 34 <code>"),
        segment("generated", "image.crop((56, 7, 8, 9))", kind="code"),
        segment("generated", "</code> done"),
    ]
    from beacon.train.core.encode import encode_trajectory
    from beacon.train.opd.score import supervised_positions

    encoded = encode_trajectory(traj, tiny_tokenizer)
    mask = coordinate_mask(traj, encoded, SimpleNamespace(tokenizer=tiny_tokenizer))
    positions = supervised_positions(encoded)
    assert mask.shape == positions.shape
    marked = [encoded.input_ids[int(t)] for t in positions[mask]]
    text = tiny_tokenizer.decode(marked)
    assert sorted(c for c in text if c.isdigit()) == sorted("56789")  # not 12 or 34


def relative_change(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> float:
    moved = sum(float((after[k].float() - before[k].float()).pow(2).sum()) for k in before)
    size = sum(float(before[k].float().pow(2).sum()) for k in before)
    return (moved / size) ** 0.5


@pytest.mark.slow
@pytest.mark.parametrize(("min_loss", "steps"), [(1e-6, 30), (0.0, 4)], ids=["floor", "no_floor"])
def test_teacher_equal_to_student_is_a_no_op(
    tiny_model_path: Path, tmp_path: Path, min_loss: float, steps: int
) -> None:
    """The control run: teacher = student gives a loss of float noise; with the floor every
    optimizer step is skipped and the weights stay put over 30 steps (< 1e-4 relative L2).
    Without it Adam turns step 1's noise (~1e-8, gradient norm ~3e-6) into a full-size step,
    after which the student differs from its frozen copy and the loss is real."""
    out = tmp_path / "run"
    cfg = opd_settings(tiny_model_path, tiny_model_path, out, teacher__context="base")
    cfg["rollout"].update(group_size=2, items_per_step=1)
    cfg["rollout"]["agent"].update(max_turns=1, max_new_tokens_per_turn=6, max_total_new_tokens=6)
    cfg["train"].update(max_steps=steps, save_every=steps)
    cfg["min_loss"] = min_loss
    run_opd(OPDConfig.model_validate(cfg))
    metrics = read_metrics(out / "metrics.jsonl")
    assert len(metrics) == steps and abs(metrics[0]["loss"]) < 1e-6
    before = load_file(tiny_model_path / "model.safetensors")
    after = load_file(out / f"checkpoint-{steps}" / "model.safetensors")
    change = relative_change(before, {k: after[k] for k in before})
    if min_loss > 0:
        assert all(m["update_skipped"] == 1 and abs(m["loss"]) < 1e-6 for m in metrics)
        assert change < 1e-4
    else:
        assert change > 1e-3  # what the floor prevents
