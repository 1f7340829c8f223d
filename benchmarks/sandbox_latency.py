"""Sandbox latency: in-process exec (floor) vs a fresh python per call (CodeV) vs Beacon.

The workload is one typical tool call on a 4000x3000 image: crop a region, resize it, return
the result as an image. Measured per call, after warm-up:

    (a) exec in this process, no isolation: the floor any sandbox adds to; (a') the same with
        the idle gap of (c') before each call (caches cool down in the gap, for both)
    (b) a fresh `python` process per call that loads the image from disk (CodeV-style)
    (c) Beacon's Sandbox: jailed pre-forked worker, one forked child per call, calls back to
        back; (c') the same with a short idle gap before each call, as in an agent loop where
        the model generates between calls (the worker forks its next child in that gap)

plus (c) throughput with every worker busy (one session per worker, calls back to back).
Targets: (c) median within 1.5x of (a) and (c') of (a'), at least 5x faster than (b),
overhead over (a) < 10 ms. (a) and (c) are timed in alternating blocks of calls, and so are
(a') and (c'): on a shared machine the load drifts by more than these ratios' margins from one
minute to the next, and alternating makes both sides of each ratio see the same drift.

    python benchmarks/sandbox_latency.py [--calls 40] [--fresh-calls 10] [--gap-ms 20]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

import numpy as np
from PIL import Image

from beacon.sandbox import Sandbox, SandboxConfig

CODE = """
crop = image.crop((1200, 900, 2400, 1800))
small = crop.resize((600, 450))
small.show()
"""

FRESH_SCRIPT = """
import sys
import numpy as np
from PIL import Image
image = Image.open(sys.argv[1]); image.load()
crop = image.crop((1200, 900, 2400, 1800))
small = crop.resize((600, 450))
small.save(sys.argv[2], compress_level=1)
"""


def make_image() -> Image.Image:
    """A 4000x3000 photo-like image: smooth gradients plus mild noise."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:3000, 0:4000]
    base = np.stack([x * 255 // 4000, y * 255 // 3000, (x + y) * 255 // 7000], axis=-1)
    noise = rng.integers(0, 16, size=base.shape)
    return Image.fromarray((base + noise).clip(0, 255).astype(np.uint8))


def timed(fn: Callable[[], object], calls: int, warmup: int = 3, gap_s: float = 0.0) -> list[float]:
    """Wall time of each call; `gap_s` of idle time before each (the model generating)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(calls):
        time.sleep(gap_s)
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def alternating(
    fns: list[Callable[[], object]], calls: int, gap_s: float = 0.0, block: int = 10
) -> list[list[float]]:
    """`timed` for each of `fns`, `calls` each, in turns of `block` calls (warm-up each turn)."""
    times: list[list[float]] = [[] for _ in fns]
    for start in range(0, calls, block):
        for fn, out in zip(fns, times, strict=True):
            out += timed(fn, min(block, calls - start), warmup=1, gap_s=gap_s)
    return times


def in_process(image: Image.Image) -> Callable[[], object]:
    def call() -> object:
        shown: list[Image.Image] = []
        ns = {"image": image}
        exec(CODE.replace("small.show()", "shown.append(small)"), {**ns, "shown": shown})
        return shown

    return call


def fresh_process(path: str, out_dir: str) -> Callable[[], object]:
    out = os.path.join(out_dir, "out.png")

    def call() -> object:
        subprocess.run([sys.executable, "-c", FRESH_SCRIPT, path, out], check=True)
        return Image.open(out).convert("RGB")

    return call


def throughput(sandbox: Sandbox, image: Image.Image, calls_per_worker: int) -> float:
    sessions = [sandbox.session(images=[image]) for _ in range(sandbox.config.num_workers)]
    for s in sessions:
        s.run(CODE)  # warm-up

    def loop(session) -> None:
        for _ in range(calls_per_worker):
            result = session.run(CODE)
            if not result.ok:
                raise RuntimeError(result.error)

    threads = [threading.Thread(target=loop, args=(s,)) for s in sessions]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    for s in sessions:
        s.close()
    return len(sessions) * calls_per_worker / elapsed


def row(name: str, times: list[float], floor: float) -> str:
    med = statistics.median(times)
    p90 = statistics.quantiles(times, n=10)[-1]
    return f"| {name:<38} | {med * 1e3:8.1f} | {p90 * 1e3:8.1f} | {med / floor:6.2f}x |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40, help="timed calls for (a) and (c)")
    parser.add_argument("--fresh-calls", type=int, default=10, help="timed calls for (b)")
    parser.add_argument(
        "--gap-ms", type=float, default=20.0, help="idle time between calls for the (c') row"
    )
    parser.add_argument(
        "--no-fresh", action="store_true", help="skip (b), e.g. when comparing sandbox variants"
    )
    args = parser.parse_args()

    image = make_image()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "image.png")
        image.save(path, compress_level=1)
        fresh = [] if args.no_fresh else timed(fresh_process(path, tmp), args.fresh_calls, 1)
    with Sandbox(SandboxConfig(max_calls_per_session=10_000)) as sandbox:
        with sandbox.session(images=[image]) as session:
            pair = [in_process(image), lambda: session.run(CODE)]
            floor, beacon = alternating(pair, args.calls)
            floor_spaced, spaced = alternating(pair, args.calls, gap_s=args.gap_ms / 1000)
            check = session.run(CODE)
        rate = throughput(sandbox, image, args.calls)
        isolation, workers = sandbox.isolation, sandbox.config.num_workers
    if not (check.ok and check.images and check.images[0].size == (600, 450)):
        raise SystemExit(f"sandbox call failed: {check.error}")

    a, a2, c, c2 = (statistics.median(t) for t in (floor, floor_spaced, beacon, spaced))
    b = statistics.median(fresh) if fresh else math.nan
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    print(f"sandbox: isolation={isolation}, workers={workers}; image 4000x3000, crop+resize+return")
    print()
    print(f"| {'path':<38} | {'med ms':>8} | {'p90 ms':>8} | {'vs (a)':>7} |")
    gap = f"{args.gap_ms:g} ms apart"
    print(f"|{'-' * 40}|{'-' * 10}|{'-' * 10}|{'-' * 9}|")
    print(row("(a) in-process exec, no isolation", floor, a))
    print(row(f"(a') in-process exec, {gap}", floor_spaced, a))
    if fresh:
        print(row("(b) fresh python per call (CodeV)", fresh, a))
    print(row("(c) Beacon sandbox, back to back", beacon, a))
    print(row(f"(c') Beacon sandbox, {gap}", spaced, a))
    print()
    print(f"(c) / (a) = {c / a:.2f}x, (c') / (a') = {c2 / a2:.2f}x   (target <= 1.5x)")
    print(f"(b) / (c) = {b / c:.1f}x, (b) / (c') = {b / c2:.1f}x   (target >= 5x)")
    print(
        f"(c) - (a) = {(c - a) * 1e3:.1f} ms, (c') - (a') = {(c2 - a2) * 1e3:.1f} ms per call"
        "   (target < 10 ms)"
    )
    print(f"throughput, all {workers} workers busy: {rate:.0f} calls/s")


if __name__ == "__main__":
    main()
