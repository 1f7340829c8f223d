"""OPD loss stage: ReVuE's efficient top-K loss vs a straightforward full-vocabulary one.

Two stages, each measured for both implementations at Qwen-like sizes (vocab 151,936, hidden
2048, K = 32):

    teacher  two teachers (base and reflection-conditioned) turn final hidden states [T, H] and
             the output projection [V, H] into top-K ids, top-K log-probs and the sampled token's
             log-prob. Baseline: full [T, V] logits and log-softmax, then top-K and gather.
             Candidate: `teacher_topk`, the same in blocks of --chunk positions.
    student  the student's loss forward and backward (gradients for the hidden states and the
             lm_head weight) given the adopted teacher's support. Baseline: full [T, V] logits
             and log-softmax, gather the support, renormalise, KL. Candidate: `support_logits`
             (K rows of the lm_head per position) + `topk_reverse_kl`. Both use Eq. 9 weights.

Each (implementation, stage) runs in a fresh process so that its peak memory is its own: on
CPU the peak resident set above the set-up inputs (VmHWM after resetting it through
/proc/self/clear_refs), on CUDA `max_memory_allocated` above the inputs. Time is the
best of --repeats runs; memory is the last run's (the first also pays one-off library start-up).
The student rows also list peak memory without the lm_head weight gradient ([V, H], the same
tensor for both: every training step that trains the lm_head materialises it).
The student loss values of both implementations must agree to 1e-5.

    python benchmarks/opd_loss.py [--positions 2048] [--device cpu] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable

import torch

from beacon.train.opd.revue_loss import (
    grouped_weights,
    support_logits,
    teacher_topk,
    topk_reverse_kl,
)

MIB = 2**20


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def setup(args: argparse.Namespace) -> dict[str, torch.Tensor]:
    """Inputs shared by both implementations (same seed, same values)."""
    gen = torch.Generator().manual_seed(0)
    dtype, device = getattr(torch, args.dtype), torch.device(args.device)
    t, v, h, k = args.positions, args.vocab, args.hidden, args.k

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * scale).to(device=device, dtype=dtype)

    stride = v // k  # K distinct support ids per position, spread over the vocabulary
    offsets = torch.randint(0, v, (t, 1), generator=gen)
    support = ((offsets + torch.arange(k) * stride) % v).to(device)
    teacher_lp = torch.sort(torch.randn(t, k, generator=gen) - 8, descending=True).values
    return {
        "t_hidden": randn(t, h),
        "t_hidden_r": randn(t, h),
        "t_weight": randn(v, h, scale=0.02),
        "s_hidden": randn(t, h).requires_grad_(True),
        "s_weight": randn(v, h, scale=0.02).requires_grad_(True),
        "sampled": torch.randint(0, v, (t,), generator=gen).to(device),
        "support": support,
        "teacher_lp": teacher_lp.to(device),
        "impact": torch.rand(t, generator=gen).to(device),
    }


def teacher_baseline(x: dict, args: argparse.Namespace) -> float:
    total = 0.0
    for hidden in (x["t_hidden"], x["t_hidden_r"]):
        with torch.no_grad():
            logp = torch.log_softmax((hidden @ x["t_weight"].T).float(), dim=-1)
            top = torch.topk(logp, args.k, dim=-1)
            sampled = logp.gather(-1, x["sampled"][:, None])
        total += float(top.values.sum() + sampled.sum())
    return total


def teacher_candidate(x: dict, args: argparse.Namespace) -> float:
    total = 0.0
    for hidden in (x["t_hidden"], x["t_hidden_r"]):
        s = teacher_topk(hidden, x["t_weight"], x["sampled"], args.k, args.chunk)
        total += float(s.topk_logprobs.sum() + s.sampled_logprob.sum())
    return total


def student_baseline(x: dict, args: argparse.Namespace) -> float:
    logp_full = torch.log_softmax((x["s_hidden"] @ x["s_weight"].T).float(), dim=-1)
    log_p = torch.log_softmax(logp_full.gather(-1, x["support"]), dim=-1)
    log_q = torch.log_softmax(x["teacher_lp"], dim=-1)
    kl = (log_p.exp() * (log_p - log_q)).sum(-1)
    loss = (grouped_weights(x["impact"]) * kl).mean()
    loss.backward()
    return float(loss)


def student_candidate(x: dict, args: argparse.Namespace) -> float:
    z = support_logits(x["s_hidden"], x["s_weight"], x["support"], chunk_size=args.student_chunk)
    kl = topk_reverse_kl(z, x["teacher_lp"])
    loss = (grouped_weights(x["impact"]) * kl).mean()
    loss.backward()
    return float(loss)


RUNS: dict[str, Callable[[dict, argparse.Namespace], float]] = {
    "teacher/baseline": teacher_baseline,
    "teacher/candidate": teacher_candidate,
    "student/baseline": student_baseline,
    "student/candidate": student_candidate,
}


def measure(args: argparse.Namespace) -> dict:
    """One (stage, implementation) in this process: best time, peak memory above inputs, value."""
    x = setup(args)
    fn, cuda = RUNS[args.run], args.device.startswith("cuda")
    times, value, peak = [], 0.0, 0
    for _ in range(args.repeats):
        for name in ("s_hidden", "s_weight"):
            x[name].grad = None
        if cuda:
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        else:
            base = _rss_bytes()
            if not _reset_peak():
                raise SystemExit("cannot reset the peak RSS (/proc/self/clear_refs); Linux only")
        start = time.perf_counter()
        value = fn(x, args)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        peak = (torch.cuda.max_memory_allocated() if cuda else _peak_rss_bytes()) - base
    return {"run": args.run, "time_s": min(times), "peak_bytes": peak, "value": value}


def child(run: str, flags: list[str], timeout_s: float | None = None) -> dict:
    """`measure` of `run` in a fresh process given this script's `flags`; RuntimeError (its
    last error line first) if it fails, TimeoutExpired after `timeout_s`."""
    cmd = [sys.executable, __file__, "--child", run, *flags]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout_s)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or [""])[-1]
        raise RuntimeError(f"{run} failed: {last}\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(args: argparse.Namespace, results: dict[str, dict]) -> None:
    grad_w = (
        args.vocab * args.hidden * torch.tensor([], dtype=getattr(torch, args.dtype)).element_size()
    )
    print(
        f"# opd_loss: T={args.positions} V={args.vocab} H={args.hidden} K={args.k} "
        f"dtype={args.dtype} device={args.device} chunk={args.chunk} "
        f"({platform.machine()}, {os.cpu_count()} cpus, torch {torch.__version__})"
    )
    print(f"{'stage':<26}{'baseline':>14}{'candidate':>14}{'ratio':>10}")
    for stage in ("teacher", "student"):
        b, c = results[f"{stage}/baseline"], results[f"{stage}/candidate"]
        rows = [
            (f"{stage} time (s)", b["time_s"], c["time_s"]),
            (f"{stage} peak mem (MiB)", b["peak_bytes"] / MIB, c["peak_bytes"] / MIB),
        ]
        if stage == "student":
            rows.append(
                (
                    "  without lm_head grad",
                    (b["peak_bytes"] - grad_w) / MIB,
                    max(c["peak_bytes"] - grad_w, 1) / MIB,
                )
            )
        for name, vb, vc in rows:
            print(f"{name:<26}{vb:>14.2f}{vc:>14.2f}{vb / vc:>9.1f}x")
    tb = results["teacher/baseline"]["time_s"] + results["student/baseline"]["time_s"]
    tc = results["teacher/candidate"]["time_s"] + results["student/candidate"]["time_s"]
    mb = max(results["teacher/baseline"]["peak_bytes"], results["student/baseline"]["peak_bytes"])
    mc = max(results["teacher/candidate"]["peak_bytes"], results["student/candidate"]["peak_bytes"])
    print(f"{'both time (s)':<26}{tb:>14.2f}{tc:>14.2f}{tb / tc:>9.1f}x")
    print(f"{'both peak mem (MiB)':<26}{mb / MIB:>14.2f}{mc / MIB:>14.2f}{mb / mc:>9.1f}x")
    lb, lc = results["student/baseline"]["value"], results["student/candidate"]["value"]
    vb, vc = results["teacher/baseline"]["value"], results["teacher/candidate"]["value"]
    print(f"student loss: baseline {lb:.8f} candidate {lc:.8f} |diff| {abs(lb - lc):.2e}")
    print(f"teacher checksum |rel diff| {abs(vb - vc) / abs(vb):.2e}")
    if abs(lb - lc) > 1e-5:
        raise SystemExit("the two losses differ by more than 1e-5")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--positions", type=int, default=2048, help="supervised positions T")
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--k", type=int, default=32)
    parser.add_argument("--chunk", type=int, default=128, help="teacher positions per block")
    parser.add_argument("--student-chunk", type=int, default=64, help="student gather block")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--child", dest="run", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.run:
        print(json.dumps(measure(args)))
        return
    try:
        results = {run: child(run, sys.argv[1:]) for run in RUNS}
    except RuntimeError as exc:
        raise SystemExit(str(exc)) from None
    report(args, results)


if __name__ == "__main__":
    main()
