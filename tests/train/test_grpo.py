"""`beacon train grpo` on the tiny model and synth: config errors, hints, weight sync, the HGCE
ratio against direct forwards, and kill -9 + resume equal to an uninterrupted run."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import yaml

from beacon import configs
from beacon.config import ConfigError, load_config
from beacon.rollout import RolloutStats
from beacon.train.core.checkpoint import latest_checkpoint
from beacon.train.core.encode import token_logprobs
from beacon.train.core.metrics import read_metrics
from beacon.train.grpo.config import GRPOConfig
from beacon.train.grpo.hints import HintSource, check_hint, read_hints, synth_region_hint
from beacon.train.grpo.policy import StepTotals, hinted_old_logprobs, policy_rows, policy_update
from beacon.train.grpo.recipe import build_parts, resolve_model, run_grpo, sync_weights

from .grpo_helpers import choice_processors, grpo_settings

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("grpo_worker.py")
KEYS = ("step", "loss", "grad_norm", "rl/reward_mean", "rl/accuracy", "rl/groups_kept")


@pytest.mark.parametrize(
    "path", sorted((configs.root() / "train").glob("grpo_*.yaml")), ids=lambda p: p.name
)
def test_shipped_grpo_configs_validate(path: Path) -> None:
    assert ":GRPOConfig" in path.read_text().splitlines()[0]
    assert isinstance(load_config(GRPOConfig, path), GRPOConfig)


def test_shipped_config_loads_and_errors_name_the_setting() -> None:
    cfg = load_config(GRPOConfig, configs.config_path("grpo_tiny"))
    assert cfg.rl.hgce.enabled and cfg.rl.reward == "naar"
    with pytest.raises(ConfigError, match=r"rollout\.group_size=1"):
        load_config(GRPOConfig, configs.config_path("grpo_tiny"), ["rollout.group_size=1"])
    with pytest.raises(ConfigError, match="kl_coef"):
        load_config(GRPOConfig, configs.config_path("grpo_tiny"), ["rl.loss.kl_coef=0.1"])


def test_synth_region_hints_are_checked_and_cached_hints_win(tmp_path: Path) -> None:
    from beacon.benchmarks.synth import generate

    for index in range(20):
        sample = generate(0, index)
        hint = synth_region_hint(sample)
        assert hint is not None and str(sample.metadata["region"][0]) in hint
        check = check_hint(hint, sample.answer, sample.options)
        assert check.ok or check.problems  # a coincident number is refused, never shown
    path = tmp_path / "hints.jsonl"
    path.write_text('{"benchmark": "synth", "sample_id": "3", "hint": "Count the red ones."}\n')
    assert read_hints(path).accepted == {("synth", "3"): "Count the red ones."}
    source = HintSource(str(path), synth_region_hints=True)
    assert source.hint(generate(0, 3)) == "Count the red ones."
    assert source.hint(generate(0, 4)) == synth_region_hint(generate(0, 4))
    assert HintSource(None, synth_region_hints=False).hint(generate(0, 4)) is None


def _hints_file(path: Path) -> tuple[Any, Any, Any]:
    """hints.jsonl as `beacon data hints` writes it: synth item 0 accepted, item 1 refused (every
    attempt leaked), item 2 never decided (no row). Returns the three samples."""
    from beacon.benchmarks.synth import generate
    from beacon.data.hint_writing import HintRecord

    accepted, refused, missing = (generate(0, index) for index in range(3))
    rows = [
        HintRecord("synth", accepted.id, "Crop the labelled bar and zoom in.", True, 1),
        HintRecord(
            "synth",
            refused.id,
            None,
            False,
            2,
            rejected=[{"hint": f"It is {refused.answer}.", "reasons": ["states the answer"]}] * 2,
        ),
    ]
    path.write_text("".join(json.dumps(asdict(row)) + "\n" for row in rows))
    return accepted, refused, missing


def test_hints_the_pipeline_refused_are_never_shown_and_are_counted(tmp_path: Path) -> None:
    from beacon.rollout import Group
    from beacon.train.grpo.recipe import rescue
    from beacon.types import Trajectory
    from beacon.verify import Verdict

    path = tmp_path / "hints.jsonl"
    accepted, refused, missing = _hints_file(path)
    source = HintSource(str(path), synth_region_hints=False)
    assert [source.hint(s) for s in (accepted, refused, missing)] == [
        "Crop the labelled bar and zoom in.",
        None,  # not the text "None"
        None,
    ]
    cached = read_hints(path)
    assert cached.accepted == {("synth", accepted.id): "Crop the labelled bar and zoom in."}
    assert cached.refused == {("synth", refused.id)}

    asked: list[tuple[list[str], list[str]]] = []

    class Rollouts:
        def groups(self, samples: list[Any], step: int, hints: list[str]) -> tuple[list, Any]:
            asked.append(([s.id for s in samples], hints))
            return [], RolloutStats()

    def all_wrong(sample: Any) -> Group:
        trajs = [Trajectory(sample.id, "text", "thyme") for _ in range(2)]
        return Group(sample, 0, trajs, [Verdict(False, 0.0, True, "x", "rule")] * 2)

    parts = SimpleNamespace(hints=source, rollouts=Rollouts(), run_dir=tmp_path)
    cfg = GRPOConfig.model_validate(grpo_settings(tmp_path / "run"))
    out, _ = rescue(parts, cfg, [all_wrong(s) for s in (accepted, refused, missing)], step=0)
    assert asked == [([accepted.id], ["Crop the labelled bar and zoom in."])]
    assert (out.refused, out.missing) == (1, 1)


def test_a_hint_row_with_a_value_of_another_type_names_the_record(tmp_path: Path) -> None:
    path = tmp_path / "hints.jsonl"
    path.write_text('{"benchmark": "synth", "sample_id": "3", "hint": "Zoom.", "accepted": "no"}\n')
    with pytest.raises(ValueError, match=r"record 1 .*accepted 'no'.*rollout\.hints"):
        read_hints(path)


@pytest.mark.slow
def test_grpo_counts_refused_hints_in_its_metrics(tmp_path: Path) -> None:
    """Every item's hint refused by the pipeline, no scripted fallback: no group is hinted, and
    each all-wrong group is in rl/hint_refused of metrics.jsonl, none in rl/hint_missing."""
    from beacon.benchmarks.synth import generate

    path = tmp_path / "hints.jsonl"
    refused = {"hint": None, "accepted": False, "attempts": 2, "rejected": [], "error": None}
    rows = [{"benchmark": "synth", "sample_id": generate(0, i).id, **refused} for i in range(3)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    settings = grpo_settings(tmp_path / "run", max_steps=2, save_every=10)
    settings["rollout"].update(hints=str(path), synth_region_hints=False)
    run_grpo(GRPOConfig.model_validate(settings), logits_processors=choice_processors)
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert sum(m["rl/hint_refused"] for m in metrics) >= 1  # item 2 is never answered right
    assert sum(m["rl/hint_missing"] for m in metrics) == 0
    assert sum(m["rl/groups_hinted"] for m in metrics) == 0


@contextlib.contextmanager
def _parts(tmp_path: Path, **rl: Any):
    from beacon.train.core.setup import make_accelerator

    settings = grpo_settings(tmp_path / "run")
    settings["rl"].update(rl)
    cfg = resolve_model(GRPOConfig.model_validate(settings))
    with contextlib.ExitStack() as stack:
        accelerator = make_accelerator(cfg.model, cfg.train)
        parts = build_parts(cfg, accelerator, tmp_path / "run", stack, choice_processors)
        yield cfg, parts


@pytest.mark.slow
def test_the_engine_generates_with_the_trainer_weights(tmp_path: Path) -> None:
    with _parts(tmp_path) as (_, parts):
        model = parts.policy.model
        with torch.no_grad():
            for param in model.parameters():
                param.zero_()
        sync_weights(parts)
        engine_params = parts.engine.model.state_dict()
        assert engine_params.keys() == model.state_dict().keys()
        assert all(bool((t == 0).all()) for t in engine_params.values())


def _forward_logprobs(model: Any, tok: Any, ids: list[int], images: list[Any]) -> torch.Tensor:
    """Log-probs at T = 1 of one forward over `ids` with `images`, independent of collate."""
    input_ids = torch.tensor([ids])
    pixels = tok.processor.image_processor(images=images, return_tensors="pt")
    with torch.no_grad():
        logits = model(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            pixel_values=pixels["pixel_values"],
            image_grid_thw=pixels["image_grid_thw"],
            mm_token_type_ids=(input_ids == tok.image_token_id).long(),
        ).logits
    return token_logprobs(logits, input_ids)[0]


@pytest.mark.slow
def test_hgce_ratio_uses_hinted_old_and_unhinted_new_logprobs(tmp_path: Path) -> None:
    with _parts(tmp_path) as (cfg, parts):
        sample = parts.samples[0]
        (group,), _ = parts.rollouts.groups([sample], step=0, hints=["Crop the top left first."])
        trajs = group.trajectories
        assert all(t.mode == "hinted" and t.original_prompt is not None for t in trajs)
        rows = policy_rows(trajs, [1.0] * len(trajs), parts.tokenizer)
        lp = parts.policy
        old = hinted_old_logprobs(lp.accelerator, lp.model, rows, trajs, parts.collate)
        tokens = sum(r.encoded.num_loss_tokens for r in rows)
        totals = StepTotals(sequences=len(rows), loss_tokens=tokens)
        update = policy_update(
            lp.accelerator, lp.model, rows, old, parts.collate, cfg.rl.loss, 100_000, 0, totals
        )
        lp.optimizer.zero_grad()

        ratios = []
        for traj, row in zip(trajs, rows, strict=True):
            images = [parts.rollouts.loop.store.get(k) for k in row.encoded.images]
            new = _forward_logprobs(lp.model, parts.tokenizer, row.encoded.input_ids, images)
            hinted = _forward_logprobs(lp.model, parts.tokenizer, row.sampling.input_ids, images)
            n = len(row.encoded) - len(traj.original_prompt.token_ids)  # response tokens
            assert len(row.sampling) > len(row.encoded)  # the hinted prompt is longer
            on = torch.tensor(row.encoded.loss_mask[-n:], dtype=torch.bool)
            ratios.append((new[-n:][on] - hinted[-n:][on]).exp())
        direct = torch.cat(ratios)
        assert torch.allclose(torch.tensor(update.ratio_mean), direct.mean(), atol=1e-5)
        assert torch.allclose(torch.tensor(update.ratio_max), direct.max(), atol=1e-5)
        assert (direct - 1).abs().max() > 1e-3  # the hint moved the probabilities


@pytest.mark.slow
def test_policy_update_packs_rows_and_keeps_the_gradient(tmp_path: Path) -> None:
    """With the per-micro-batch cost the update packs the group into few micro-batches (without
    it every row went alone: the least padding); the gradient is the same either way."""
    with _parts(tmp_path) as (cfg, parts):
        (group,), _ = parts.rollouts.groups([parts.samples[0]], step=0)
        trajs = group.trajectories
        advantages = [(-1.0) ** i * (1 + i / 10) for i in range(len(trajs))]
        rows = policy_rows(trajs, advantages, parts.tokenizer)
        lp = parts.policy
        totals = StepTotals(len(rows), sum(r.encoded.num_loss_tokens for r in rows))

        def gradient(cost: int) -> tuple[int, list[torch.Tensor]]:
            lp.optimizer.zero_grad()
            update = policy_update(
                lp.accelerator, lp.model, rows, {}, parts.collate, cfg.rl.loss, 8192, cost, totals
            )
            grads = [p.grad.clone() for p in lp.model.parameters() if p.grad is not None]
            return update.microbatches, grads

        alone, reference = gradient(0)
        packed, grads = gradient(256)
        lp.optimizer.zero_grad()
    assert len({len(r.encoded) for r in rows}) > 1  # unequal lengths: packing pads
    assert alone == len(rows) and packed < alone
    assert len(grads) == len(reference)
    for a, b in zip(grads, reference, strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def _metrics(run: Path) -> list[tuple]:
    return [tuple(m[k] for k in KEYS) for m in read_metrics(run / "metrics.jsonl")]


@pytest.mark.slow
def test_grpo_kill_and_resume_repeats_the_uninterrupted_run(tmp_path: Path) -> None:
    straight = tmp_path / "straight"
    state = run_grpo(
        GRPOConfig.model_validate(grpo_settings(straight)), logits_processors=choice_processors
    )
    assert state.step == 3
    rows = read_metrics(straight / "metrics.jsonl")
    assert [m["step"] for m in rows] == [1, 2, 3]
    assert any(m["sequences"] > 0 and m["grad_norm"] > 0 for m in rows)  # something trained
    assert sum(m["rl/groups_hinted"] for m in rows) > 0  # HGCE ran
    for key in ("rl/p_tool_easy", "rl/mode_adaptiveness", "rl/clip_frac", "time/rollout_s"):
        assert key in rows[0]

    killed = tmp_path / "killed"
    config = tmp_path / "killed.yaml"
    config.write_text(yaml.safe_dump(grpo_settings(killed)))
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    while latest_checkpoint(killed) is None:
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert latest_checkpoint(killed).name in ("checkpoint-1", "checkpoint-2")

    run_grpo(GRPOConfig.model_validate(grpo_settings(killed)), True, choice_processors)
    assert _metrics(killed) == _metrics(straight)


def test_script_choice_allows_only_script_continuations() -> None:
    from beacon.fakes.logits import next_script_tokens

    scripts = [[5, 6, 7], [5, 8], [9]]
    assert next_script_tokens([1, 2], scripts) == [5, 9]  # nothing begun: any script's start
    assert next_script_tokens([1, 5], scripts) == [6, 8]  # both scripts starting with 5 go on
    assert next_script_tokens([5, 6], scripts) == [7]
