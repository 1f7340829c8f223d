"""Beacon at real model size: Qwen2.5-VL-3B- and 7B-shaped random models on one GPU, bf16.

No checkpoint can be downloaded, so each model is built from its published config
(Qwen/Qwen2.5-VL-{3B,7B}-Instruct `config.json`: sizes, heads, vocabulary, tied embeddings, the
32-block windowed vision tower) with random weights (initializer_range 0.02), made on the device
in bf16 and saved with the tiny model's tokenizer, processor and chat template
(`beacon.engines.tiny`), so every component loads it by path. Each measurement runs the
project's own code in a fresh process (its peak memory is its own):

1. SFT: `train_throughput.run_mode` (the SFT recipe's parts, `forward_backward`,
   `optimizer_step`: fp32 weights + AdamW, bf16 autocast) on the demo's mixed-length multi-turn
   Thyme batches (`write_trajectories`, 32 a step): naive padding (micro-batches of 4 rows; 8
   rows at 3B without checkpointing would need an estimated ~145 GiB), length bucketing at the
   naive run's largest micro-batch, and bucketing with gradient checkpointing. Real
   (non-padding) tokens/s over the timed steps; MFU = F * N * tokens/s / --peak-tflops, F = 6 (4
   with LoRA: no weight gradients), N = the language model's matmul parameters (decoder layers +
   lm_head; embeddings, vision tower and attention scores left out, so MFU is slightly low).
   Peak = `torch.cuda.max_memory_allocated` (CPU: peak RSS). 7B full fine-tuning holds fp32
   weights, gradients and AdamW moments (16 B/param = 133 GB), more than the GPU, so 7B runs
   LoRA (r=16) with checkpointing.
2. GRPO: `grpo_step.time_steps` (`beacon.train.grpo.grpo_step`, in-process `hf` engine) on the
   3B checkpoint with gradient checkpointing, one step after a warm-up, split as
   `grpo_step.PARTS`.
3. OPD: `opd_loss.py`'s four children (teacher / student x full-vocabulary baseline / top-K) at
   V = 151,936, T = 4096, H = 2048, bf16.
4. The `hf` engine's generated tokens/s at batch 1, 8, 32 (an image prompt; end-of-sequence
   kept away, so every row runs to its max tokens), both models.
5. FSDP2 (`--fsdp2`, alone): `beacon train sft`, `grpo` and `opd` each for two steps under
   `accelerate launch --config_file <shipped fsdp config> --num_processes 1` (FSDP2,
   SHARDED_STATE_DICT, bf16, gradient checkpointing; `sharded_steps.py`), a checkpoint after
   each; checkpoint-2 is deleted and the run resumed from checkpoint-1's sharded state, so step
   2 runs again: the row gives the distributed type and FSDP version the recipe's Accelerator
   ran with, the state's layout, and step 2's loss and grad norm both times. The student has
   the 3B widths (hidden 2048, vocabulary 151,936) cut to 4 decoder layers and 4 vision blocks
   ("3B-cut"): a whole 3B checkpoint holds ~60 GB (fp32 model 15 + its shards 15 + AdamW 30),
   two of them more than the machine's 64 GiB disk. OPD's teacher is a small random model on
   the same vocabulary. On CPU the same runs go without FSDP: accelerate chooses FSDP only for
   an accelerator device (`AcceleratorState`, accelerate/state.py 947-974, 1.16), and CPU
   processes get MULTI_CPU / DDP even with an FSDP2 plugin (tests/train/test_fsdp2.py runs the
   step code under torch's `fully_shard` on CPU instead).

Every section is guarded: an error (OOM, a missing package) is printed in its row and the run
goes on; a section starts only if --budget-s has about its time left, and one still running at
the budget is stopped and says so. One markdown table at the end (and in --out).

    python benchmarks/gpu_real_size.py [--out table.md]   # a GPU: 3B + 7B, <= 450 s
    python benchmarks/gpu_real_size.py --device cpu       # CPU variant (the default w/o CUDA)
    python benchmarks/gpu_real_size.py --dry-run          # configs, counts, memory plans (meta)
    python benchmarks/gpu_real_size.py --fsdp2            # section 5 alone (GPU: ~5 min)

The CPU variant runs the same code with small shapes (hidden 256 / 384, the tiny tokenizer's
vocabulary), 8 rows per naive micro-batch, OPD at T = 256 in float32 and 16 new tokens; its MFU
column is "-". The 3B checkpoint is deleted before the 7B one is built (disk).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import namedtuple
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grpo_step
import opd_loss
import train_throughput
from beacon.configs import config_path

ARCH = "qwen2_5_vl"
BATCH = 32  # SFT trajectories per step
GEN_BATCHES = (1, 8, 32)
VISION = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16}
VISION |= {"window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31]}
SMALL_VISION = {"depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 2}
SMALL_VISION |= {"window_size": 112, "fullatt_block_indexes": [1]}
CUT_VISION = {"depth": 4, "fullatt_block_indexes": [3]}
TEXT_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
TEXT_KEYS += ("num_key_value_heads", "vocab_size", "tie_word_embeddings")
SHAPES = {  # TEXT_KEYS' values (vocab None: the tiny tokenizer's), vision; CPU stand-ins last
    "3B": ((2048, 11008, 36, 16, 2, 151936, True), VISION),
    "7B": ((3584, 18944, 28, 28, 4, 152064, False), VISION),
    "small": ((256, 1024, 4, 4, 2, None, True), SMALL_VISION),
    "small-wide": ((384, 1536, 6, 6, 2, None, False), SMALL_VISION),
    "3B-cut": ((2048, 11008, 4, 16, 2, 151936, True), VISION | CUT_VISION),
    "teacher": ((256, 1024, 2, 4, 2, 151936, True), SMALL_VISION),
}
SHARDED = {"cuda": ("3B-cut", "teacher"), "cpu": ("small", "small-wide")}
"""Student and OPD teacher of the FSDP2 section (`sharded_rows`), by device."""
BENCH_DIR = Path(__file__).resolve().parent
FSDP_CONFIG = config_path("fsdp")  # the shipped accelerate config (`beacon configs cp fsdp`)
Sizes = namedtuple("Sizes", "models micro sft_steps prompts group positions dtype tokens budget_s")
SIZES = {  # models as 3B, 7B; naive rows per micro-batch; timed SFT steps; GRPO prompts x G;
    # OPD T and dtype; new tokens per generation; budget
    "cuda": Sizes(("3B", "7B"), 4, 3, 4, 8, 4096, "bfloat16", 64, 450.0),
    "cpu": Sizes(("small", "small-wide"), 8, 2, 2, 4, 256, "float32", 16, 1500.0),
}


def model_config(name: str) -> Any:
    """The tiny Qwen2.5-VL's config (its token ids) with the sizes of SHAPES[name]; M-RoPE
    sections [16, 24, 24] at head_dim 128, as published."""
    from transformers import AutoConfig, Qwen2_5_VLConfig

    from beacon.engines.tiny import cached_tiny_model

    values, vision = SHAPES[name]
    d = AutoConfig.from_pretrained(cached_tiny_model(ARCH)).to_dict()
    text = d["text_config"]
    text.pop("layer_types", None)  # one entry per layer: rebuilt for the new depth
    text |= {k: v for k, v in zip(TEXT_KEYS, values, strict=True) if v is not None}
    half = text["hidden_size"] // text["num_attention_heads"] // 2
    mrope = [half - 2 * (half * 3 // 8), half * 3 // 8, half * 3 // 8]
    text |= {"max_position_embeddings": 128000, "rms_norm_eps": 1e-6, "initializer_range": 0.02}
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": mrope}
    d["vision_config"] |= vision | {"out_hidden_size": text["hidden_size"]}
    d["tie_word_embeddings"] = text["tie_word_embeddings"]
    return Qwen2_5_VLConfig.from_dict(d)


def param_counts(name: str) -> dict[str, int]:
    """All parameters, the vision tower's, and N (LM matmul params), on the meta device."""
    import torch
    from transformers import AutoModelForImageTextToText

    config = model_config(name)  # may build the tiny model first: real tensors, not meta ones
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    named = dict(model.named_parameters())  # a tied lm_head is listed once, as embed_tokens
    vision = sum(p.numel() for n, p in named.items() if "visual" in n)
    embed = sum(p.numel() for n, p in named.items() if "embed_tokens" in n)
    total = sum(p.numel() for p in named.values())
    lm_head = embed if model.config.tie_word_embeddings else 0
    return {"total": total, "vision": vision, "n_lm": total - vision - embed + lm_head}


def build_job(job: dict) -> dict:
    """Random bf16 weights of `job['shape']` made on the device, saved with the tiny model's
    tokenizer, processor, template and generation config."""
    import torch
    from transformers import AutoModelForImageTextToText

    from beacon.engines.tiny import cached_tiny_model

    start, out = time.perf_counter(), Path(job["out"])
    config = model_config(job["shape"])
    torch.manual_seed(job.get("seed", 0))
    with torch.device(job["device"]):
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out)
    for path in cached_tiny_model(ARCH).iterdir():
        if path.name != "config.json" and path.suffix != ".safetensors":
            shutil.copy2(path, out / path.name)
    size = sum(p.stat().st_size for p in out.iterdir())
    return {"seconds": time.perf_counter() - start, "gib": size / 2**30}


def grpo_job(job: dict) -> dict:
    """`grpo_step.time_steps` on `job['model']`: mean seconds per step of every part. Where no
    namespace layer or seccomp filter works (a VM's kernel may refuse them), the sandbox runs
    with `isolation: none` and `require_seccomp: false`, and the row says so: a throwaway
    machine running the benchmark's own scripted code, timing only."""
    import statistics

    from beacon.sandbox import SandboxError

    ns = argparse.Namespace(prompts=job["prompts"], group_size=job["group"], steps=1)
    model = {"path": job["model"], "gradient_checkpointing": True}
    isolation = "auto"
    try:
        rows = grpo_step.time_steps(ns, {"model": model})
    except SandboxError:
        isolation = "none"
        unsafe = {"isolation": "none", "require_seccomp": False}
        rows = grpo_step.time_steps(ns, {"model": model, "sandbox": unsafe})
    keys = [key for _, key in grpo_step.PARTS] + ["step_s"]
    return {k: statistics.mean(r[k] for r in rows) for k in keys} | {"isolation": isolation}


def generation_job(job: dict) -> dict:
    """The hf engine's generated tokens/s at each batch size, after a warm-up."""
    import torch

    from beacon.engines.base import GenerationRequest, SamplingParams
    from beacon.engines.hf import HFEngine
    from beacon.fakes.logits import NoEndOfSequence
    from beacon.fakes.trajectories import synthetic_image

    engine = HFEngine(job["model"], device=job["device"], batch_size=max(GEN_BATCHES))
    engine.logits_processors = [NoEndOfSequence(engine.tokenizer.eos_token_ids)]
    cuda = job["device"] == "cuda"
    text = "What digit is inside the box? Answer with one digit."
    content = [{"type": "image", "image": synthetic_image(0)}, {"type": "text", "text": text}]

    def run(batch: int, n: int) -> float:
        sampling = [SamplingParams(temperature=1.0, max_new_tokens=n, seed=i) for i in range(batch)]
        requests = [GenerationRequest([{"role": "user", "content": content}], s) for s in sampling]
        start = time.perf_counter()
        results = engine.generate(requests)
        torch.cuda.synchronize() if cuda else None
        failed = [r.text for r in results if r.finish_reason == "error"]
        if failed:
            raise RuntimeError(failed[0])
        return sum(len(r.token_ids) for r in results) / (time.perf_counter() - start)

    run(2, 4)
    out = {b: run(b, job["new_tokens"]) for b in GEN_BATCHES}
    return {"tokens_per_s": out, "peak_gib": torch.cuda.max_memory_allocated() / 2**30 * cuda}


def _reason(exc: BaseException) -> str:
    """One short line for a table cell; an out-of-memory error starts with OOM."""
    text = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
    return ("OOM - " if "out of memory" in text.lower() else "") + text[:160]


def _child(fn: Any, job: dict, conn: Any) -> None:
    try:
        conn.send((True, fn(job)))
    except BaseException as exc:  # the row reports it; the run goes on
        conn.send((False, _reason(exc)))


class Bench:
    """The table's rows, and the time budget every section starts against."""

    def __init__(self, budget_s: float) -> None:
        self.start, self.budget_s, self.rows = time.monotonic(), budget_s, []

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.start)

    def row(self, *cells: object) -> None:
        self.rows.append([str(c).replace("|", "/") for c in cells])
        print(f"[{time.monotonic() - self.start:4.0f} s] " + " | ".join(self.rows[-1]), flush=True)

    def isolated(self, fn: Any, job: dict, need_s: float) -> dict | str:
        """fn(job) in a fresh process: its result, or why there is none."""
        left = self.left()
        if left < need_s:
            return f"skipped: {left:.0f} s of the budget left, needs ~{need_s:.0f} s"
        ctx = mp.get_context("spawn")
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(fn, job, send))
        proc.start()
        send.close()
        try:
            if not recv.poll(left):
                proc.kill()
                return f"stopped at the budget ({self.budget_s:.0f} s)"
            return recv.recv()[1]
        except EOFError:
            proc.join()
            return f"process died (exit code {proc.exitcode})"
        finally:
            proc.join()


def sft_rows(bench: Bench, a: argparse.Namespace, name: str, model: Path, lora: bool) -> None:
    config, out = train_throughput.config, a.work / f"sft-{name}"
    micro = a.sizes.micro
    budget = train_throughput.naive_peak_tokens(config(model, a.data, out, "pad", BATCH, micro, 1))
    runs = [("bucket", True)] if lora else [("pad", False), ("bucket", False), ("bucket", True)]
    done: dict[tuple[str, bool], dict] = {}
    unit = "GiB" if a.device == "cuda" else "GiB RSS"
    for mode, gc in runs:
        cfg = config(model, a.data, out, mode, BATCH, micro, budget)
        cfg["model"] |= {"gradient_checkpointing": gc} | ({"lora": {}} if lora else {})
        job = {"config": cfg, "steps": a.sizes.sft_steps, "threads": a.threads}
        r = bench.isolated(train_throughput.run_mode, job, need_s=60 if lora else 35)
        setting = f"pad, {micro} rows" if mode == "pad" else f"bucket <= {budget} tokens"
        setting += (", grad ckpt" if gc else "") + (", LoRA r=16" if lora else "")
        if lora:
            setting += f" (full FT: 16 B/param = {16 * a.counts[name]['total'] / 1e9:.0f} GB)"
        if isinstance(r, str):
            bench.row("SFT", name, setting, r, "", "")
            continue
        done[(mode, gc)] = r
        flops = (4 if lora else 6) * a.counts[name]["n_lm"] * r["tokens_per_s"]
        mfu = f"{flops / (a.peak_tflops * 1e12):.1%}" if a.device == "cuda" else "-"
        figure = (
            f"{r['tokens_per_s']:,.0f} tok/s, MFU {mfu}, peak {r['peak_mib'] / 1024:.1f} {unit}, "
            f"padding {r['padding']:.0%}, step-1 loss {r['first_loss']:.4f}"
        )
        base = ratio = ""
        if (mode, gc) == ("bucket", False) and ("pad", False) in done:
            pad = done[("pad", False)]["tokens_per_s"]
            base, ratio = f"pad {pad:,.0f} tok/s", f"{r['tokens_per_s'] / pad:.2f}x tok/s"
        elif gc and ("bucket", False) in done:
            peak = done[("bucket", False)]["peak_mib"]
            base, ratio = f"no ckpt {peak / 1024:.1f} {unit}", f"{r['peak_mib'] / peak:.2f}x peak"
        bench.row("SFT", name, setting, figure, base, ratio)


def grpo_rows(bench: Bench, a: argparse.Namespace, name: str, model: Path) -> None:
    job = {"model": str(model), "prompts": a.sizes.prompts, "group": a.sizes.group}
    r = bench.isolated(grpo_job, job, need_s=60)
    setting = f"{a.sizes.prompts} prompts x G={a.sizes.group}, grad ckpt"
    if not isinstance(r, str) and r["isolation"] == "none":
        setting += ", sandbox isolation none (no namespaces or seccomp here)"
    if isinstance(r, str):
        return bench.row("GRPO", name, setting, r, "", "")
    step = r["step_s"]
    for part, key in grpo_step.PARTS:
        cells = (f"{r[key]:.2f} s/step", f"step {step:.2f} s", f"{r[key] / step:.0%}")
        bench.row("GRPO", name, f"{part.strip()} ({setting})", *cells)


OPD_FIGURES = (("time", "time_s", 1, "s"), ("peak", "peak_bytes", 2**20, "MiB"))


def opd_rows(bench: Bench, a: argparse.Namespace) -> None:
    flags = ["--positions", str(a.sizes.positions), "--hidden", "2048", "--vocab", "151936"]
    flags += ["--device", a.device, "--dtype", a.sizes.dtype, "--repeats", "2"]
    setting = f"T={a.sizes.positions} V=151936 K=32 {a.sizes.dtype}"
    res: dict[str, dict] = {}
    for run in opd_loss.RUNS:
        try:
            if bench.left() < 20:
                raise TimeoutError(f"{bench.left():.0f} s of the budget left")
            res[run] = opd_loss.child(run, flags, timeout_s=bench.left())
        except Exception as exc:
            return bench.row("OPD", "H=2048", f"{run}, {setting}", _reason(exc), "", "")
    for stage in ("teacher", "student"):
        b, c = res[f"{stage}/baseline"], res[f"{stage}/candidate"]
        for what, key, scale, unit in OPD_FIGURES:
            vb, vc = b[key] / scale, c[key] / scale
            cells = (f"top-K {vc:,.3f} {unit}", f"full-V {vb:,.3f} {unit}", f"{vb / vc:.1f}x")
            bench.row("OPD", "H=2048", f"{stage} {what}, {setting}", *cells)
    gap = abs(res["student/baseline"]["value"] - res["student/candidate"]["value"])
    bench.row("OPD", "H=2048", "student loss, top-K vs full-V", f"abs diff {gap:.1e}", "", "")


def generation_rows(bench: Bench, a: argparse.Namespace, name: str, model: Path) -> None:
    job = {"model": str(model), "device": a.device, "new_tokens": a.sizes.tokens}
    r = bench.isolated(generation_job, job, need_s=30 if name == a.sizes.models[0] else 40)
    if isinstance(r, str):
        return bench.row("generate", name, "hf engine", r, "", "")
    tps, peak = r["tokens_per_s"], f", peak {r['peak_gib']:.1f} GiB" * (a.device == "cuda")
    for b in GEN_BATCHES:
        setting = f"hf engine, batch {b}, {a.sizes.tokens} new tokens"
        cells = (f"{tps[b]:,.0f} tok/s" + peak * (b == 32), f"batch 1: {tps[1]:,.0f}")
        bench.row("generate", name, setting, *cells, f"{tps[b] / tps[1]:.1f}x")


def sharded_config(recipe: str, a: argparse.Namespace, student: Path, teacher: Path) -> dict:
    """Two steps of `recipe` on `student`, a checkpoint after each (both kept)."""
    out = a.work / f"fsdp2-{recipe}"
    train = {"output_dir": str(out), "max_steps": 2, "save_every": 1, "keep_last": 2}
    train |= {"lr": 1e-4, "min_lr_ratio": 1.0, "progress_bar": False, "tensorboard": False}
    model = {"path": str(student), "gradient_checkpointing": True, "mixed_precision": "auto"}
    agent = {"max_turns": 2, "max_new_tokens_per_turn": 24, "max_total_new_tokens": 48}
    if recipe == "sft":
        cfg = train_throughput.config(student, a.data, out, "bucket", 8, a.sizes.micro, 4096)
    elif recipe == "grpo":
        cfg = grpo_step.settings(out, argparse.Namespace(prompts=2, group_size=4))
        cfg["agent"] |= agent
    else:
        rollout = {"group_size": 4, "items_per_step": 2, "batch_size": 8, "concurrency": 8}
        cfg = {
            "teacher": {"path": str(teacher), "context": "base", "reencode_check": False},
            "teacher_check": {"enabled": False},
            "data": {"benchmark": "synth", "limit": 4},
            "rollout": rollout | {"agent": agent | {"code_temperature": 0.0}},
            "revue": {"weighting": "uniform"},
        }
    return cfg | {"model": model, "train": cfg.get("train", {}) | train}


def sharded_launch(a: argparse.Namespace, recipe: str, cfg: dict, timeout_s: float) -> str:
    """`sharded_steps.py` of `cfg` (FSDP2 launch on cuda, a plain process on cpu): "" when
    it succeeded, else its last error line."""
    args = [str(BENCH_DIR / "sharded_steps.py"), recipe, json.dumps(cfg)]
    args += ["resume"] * Path(cfg["train"]["output_dir"], "checkpoint-1").exists()
    cmd = [sys.executable, *args]
    if a.device == "cuda":
        accelerate = shutil.which("accelerate") or "accelerate"
        cmd = [accelerate, "launch", "--config_file", str(FSDP_CONFIG), "--num_processes", "1"]
        cmd += args
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its workers
        proc.communicate()
        return f"stopped after {timeout_s:.0f} s"
    return "" if proc.returncode == 0 else (err.strip().splitlines() or ["no output"])[-1]


def sharded_rows(bench: Bench, a: argparse.Namespace, student: Path, teacher: Path) -> None:
    """Section 5: each recipe fresh for 2 steps, then again from checkpoint-1's state."""
    from beacon.train.core.metrics import read_metrics

    name = SHARDED[a.device][0]
    for recipe in ("sft", "grpo", "opd"):
        cfg = sharded_config(recipe, a, student, teacher)
        run = Path(cfg["train"]["output_dir"])
        setting = f"{recipe}: 2 steps, checkpoint-2 deleted, resumed from checkpoint-1"
        setting += " (CPU: no FSDP in accelerate)" * (a.device == "cpu")
        failure = ""
        for phase in ("fresh", "resume"):
            if bench.left() < 30:
                failure = f"skipped: {bench.left():.0f} s of the budget left"
                break
            failure = sharded_launch(a, recipe, cfg, bench.left())
            if "SandboxError" in failure:  # no namespaces on this machine: timing only
                cfg["sandbox" if recipe == "grpo" else "rollout"]["sandbox"] = {"isolation": "none"}
                failure = sharded_launch(a, recipe, cfg, bench.left())
            if failure:
                break
            if phase == "fresh":
                fresh = read_metrics(run / "metrics.jsonl")[-1]
                shutil.rmtree(run / "checkpoint-2")
        if failure:
            bench.row("FSDP2", name, setting, failure, "", "")
            shutil.rmtree(run, ignore_errors=True)
            continue
        again = read_metrics(run / "metrics.jsonl")[-1]
        info = json.loads((run / "launch-resume.json").read_text())
        state = run / "checkpoint-2" / "state"
        shards = sorted(p.name for p in state.iterdir() if p.is_dir())
        layout = f"sharded state {', '.join(shards)}" if shards else "whole state"
        how = f"{info['distributed_type']} v{info['fsdp_version']}, {layout}"
        figure = f"{how}, peak {info['peak_gib']:.1f} GiB"
        base = f"step 2 loss {fresh['loss']:.6f}, grad norm {fresh['grad_norm']:.4f}"
        resumed = f"resumed: loss {again['loss']:.6f}, grad norm {again['grad_norm']:.4f}"
        bench.row("FSDP2", name, setting, figure, base, resumed)
        shutil.rmtree(run)  # disk for the next recipe


def build(bench: Bench, a: argparse.Namespace, name: str, seed: int = 0) -> Path | None:
    out, c = a.work / f"model-{name}", a.counts[name]
    job = {"shape": name, "device": a.device, "out": str(out), "seed": seed}
    r = bench.isolated(build_job, job, need_s=40 if name == a.sizes.models[0] else 60)
    setting = f"random bf16, {c['total'] / 1e6:,.0f}M params ({c['vision'] / 1e6:,.0f}M vision)"
    ok = not isinstance(r, str)
    figure = f"built + saved in {r['seconds']:.0f} s, {r['gib']:.1f} GiB" if ok else r
    bench.row("setup", name, setting, figure, "", "")
    return out if ok else None


def render(bench: Bench, a: argparse.Namespace) -> str:
    import torch
    import transformers

    cpu = platform.processor() or platform.machine()
    device = torch.cuda.get_device_name() if a.device == "cuda" else f"{cpu}, {a.threads} threads"
    versions = f"torch {torch.__version__}, transformers {transformers.__version__}"
    wall = f"wall {time.monotonic() - bench.start:.0f} s of a {bench.budget_s:.0f} s budget"
    date = f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"
    head = f"{device}; {versions}; {date}; {wall}; MFU against {a.peak_tflops:g} TFLOP/s"
    cols = "| section | model | setting | figure(s) | baseline | ratio |\n|---|---|---|---|---|---|"
    rows = ["| " + " | ".join(r) + " |" for r in bench.rows]
    return "\n".join([f"# Beacon at real model size ({a.device} variant)", head, "", cols, *rows])


def dry_run() -> None:
    print("| shape | params | vision | N (LM matmul) | bf16 weights | fp32 + grads + AdamW |")
    print("|---|---|---|---|---|---|")
    for name in SHAPES:
        c = {k: v / 1e9 for k, v in param_counts(name).items()}
        cells = [f"{c['total']:.3f}B", f"{c['vision']:.3f}B", f"{c['n_lm']:.3f}B"]
        cells += [f"{2 * c['total']:.1f} GB", f"{16 * c['total']:.1f} GB"]
        print(f"| {name} | " + " | ".join(cells) + " |")
    text = model_config("3B").text_config
    print(f"3B text rope: {text.rope_parameters}, tied: {text.tie_word_embeddings}")
    with tempfile.TemporaryDirectory() as tmp:
        memory_plans(Path(tmp))


PLANS = (  # title, recipe, shape, teacher shape or None, LoRA, GPUs, sharding, GB per GPU
    ("SFT 3B full", "sft", "3B", None, False, 1, "none", 80),
    ("SFT 7B full", "sft", "7B", None, False, 1, "none", 80),
    ("SFT 7B LoRA", "sft", "7B", None, True, 1, "none", 80),
    ("GRPO 3B full, in-process engine", "grpo", "3B", None, False, 1, "none", 80),
    ("OPD 7B student + 7B teacher, full", "opd", "7B", "7B", False, 8, "ddp", 96),
    ("OPD 7B student + 7B teacher, full", "opd", "7B", "7B", False, 8, "fsdp", 96),
    ("OPD 7B student + 7B teacher, full", "opd", "7B", "7B", False, 8, "zero3", 96),
)
"""The memory plans `--dry-run` prints: ReVuE's setting (7B student, 7B teacher, 8 x 96 GB) and
one GPU of 80 GB for the rest; every one with gradient checkpointing and bf16."""


def memory_plans(folder: Path) -> None:
    """`beacon.train.core.memory` for each of `PLANS`: the plan `beacon train ... --dry-run`
    prints for that config and launch, and what would make a plan that does not fit fit."""
    from beacon.train.core.memory import Launch, plan_for, remedies_that_fit, render
    from beacon.train.grpo.config import GRPOConfig
    from beacon.train.opd.config import OPDConfig
    from beacon.train.sft.config import SFTConfig

    recipes = {"sft": SFTConfig, "grpo": GRPOConfig, "opd": OPDConfig}
    for name in ("3B", "7B"):
        model_config(name).save_pretrained(folder / name)
    for title, recipe, shape, teacher, lora, gpus, sharding, gb in PLANS:
        model = {"path": str(folder / shape), "gradient_checkpointing": True}
        model |= {"lora": {"r": 16}} if lora else {}
        settings = {"model": model, "train": {"output_dir": str(folder / "run")}}
        if recipe == "sft":
            settings |= {"data": {"train": ["-"]}}
            settings["train"] |= {"max_tokens_per_microbatch": 16384}
        if teacher is not None:
            settings |= {"teacher": {"path": str(folder / teacher)}}
        cfg = recipes[recipe].model_validate(settings)
        launch = Launch(gpus, sharding, True, True, int(gb * 1e9))  # type: ignore[arg-type]
        plan = plan_for(cfg, launch)
        print("\n" + render(plan, f"{title}, gradient checkpointing"))
        if not plan.fits:
            print("  would fit with: " + "; ".join(remedies_that_fit(cfg, launch, plan_for)))


def sections(bench: Bench, a: argparse.Namespace) -> None:
    """Sections 1-4 on both models, the smaller first (its checkpoint deleted before the
    larger one is built)."""
    small, large = a.sizes.models
    if (model := build(bench, a, small)) is not None:
        sft_rows(bench, a, small, model, lora=False)
        grpo_rows(bench, a, small, model)
    opd_rows(bench, a)
    if model is not None:
        generation_rows(bench, a, small, model)
        shutil.rmtree(model)  # disk for the larger one
    if (model := build(bench, a, large)) is not None:
        generation_rows(bench, a, large, model)
        sft_rows(bench, a, large, model, lora=True)


def fsdp2_section(bench: Bench, a: argparse.Namespace) -> None:
    """Section 5: the student and OPD's teacher (another seed), then the recipes' runs."""
    student, teacher = (build(bench, a, name, seed) for seed, name in enumerate(SHARDED[a.device]))
    if student is not None and teacher is not None:
        sharded_rows(bench, a, student, teacher)


def main() -> None:
    import torch

    default = "cuda" if torch.cuda.is_available() else "cpu"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default=default)
    parser.add_argument("--budget-s", type=float, help="default: 450 on cuda, 1500 on cpu")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="H200 dense bf16")
    parser.add_argument("--out", type=Path, help="also write the table here")
    parser.add_argument("--work", type=Path, help="parent of the scratch folder (models, data)")
    parser.add_argument(
        "--dry-run", action="store_true", help="configs, parameter counts, memory plans"
    )
    parser.add_argument("--fsdp2", action="store_true", help="only the FSDP2 section (5)")
    a = parser.parse_args()
    if a.dry_run:
        return dry_run()
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # both inherited by the children
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # less fragmented
    from beacon.engines.tiny import cached_tiny_model

    a.sizes, a.threads = SIZES[a.device], torch.get_num_threads()
    bench = Bench(a.budget_s or a.sizes.budget_s)
    models = SHARDED[a.device] if a.fsdp2 else a.sizes.models
    a.counts = {name: param_counts(name) for name in models}
    with tempfile.TemporaryDirectory(dir=a.work) as tmp:
        a.work = Path(tmp)
        tiny = cached_tiny_model(ARCH)
        a.data = train_throughput.write_trajectories(tiny, a.work / "data", BATCH, seed=0)
        (fsdp2_section if a.fsdp2 else sections)(bench, a)
    table = render(bench, a) + "\n"
    print("\n" + table, end="")
    if a.out:
        a.out.write_text(table)


if __name__ == "__main__":
    main()
