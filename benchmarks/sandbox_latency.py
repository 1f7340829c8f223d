"""Sandbox latency: Beacon's sandbox against in-process `exec` and a fresh `python` per call.

Two calls on a 4000x3000 photo-like input, each timed per call after warm-up:

    heavy  crop a 1200x900 region, resize it to 600x450 and return it as an image
    light  print(image.size)

Paths:

    (a) exec in this process, no isolation: the floor any sandbox adds to
    (b) a fresh `python` process per call that loads the image from disk (CodeV's way)
    (c) Beacon's Sandbox (jailed pre-forked worker, one forked child per call), calls back to
        back; (c') the same 20 ms apart, as in an agent loop where the model generates between
        calls (the in-process floor is then timed 20 ms apart as well, (a'))

plus the sandbox's throughput with every worker busy (one session per worker, heavy calls back
to back). Targets: heavy (c') within 1.3x of (a'); light (c') - (a') under 15 ms; (b) at least
5x slower than heavy (c'). In-process and sandbox calls are timed in alternating blocks: on a
shared machine the load drifts by more than these margins from one minute to the next, and
alternating makes both sides of each ratio see the same drift.

`--tricks` times instead what each of the sandbox's speed tricks saves in a call's child
(docs/sandbox.md, "Speed"), each on and off in fresh forks of a process that imported what a
worker imports, in alternation, in one process with the worker's malloc settings and one with
glibc's defaults: the heavy call's code with its input mapped or copied, on the session
tmpfs's huge pages or not (as root); a light call
through the child's own code path, first thing in a fresh fork or after a rehearsal; the
returned image handed over through a file or through two pipes; the heavy call's carried images
saved and loaded; a full garbage collection with the worker's objects frozen or not; and
compiling the seccomp filter in the child.

`--switch` times the heavy and the light call through two real sandboxes side by side, one with
`SandboxConfig.speed_tricks` on and one with it off (the malloc settings, the spare's warm-up,
`gc.freeze` in the worker, huge pages in the session's tmpfs), 20 ms apart, in alternating
blocks: the medians, their difference and ratio.

    python benchmarks/sandbox_latency.py [--calls 40] [--fresh-calls 10] [--gap-ms 20] [--no-fresh]
    python benchmarks/sandbox_latency.py --tricks [--calls 40]
    python benchmarks/sandbox_latency.py --switch [--calls 40]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import pickle
import platform
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

import beacon.sandbox
from beacon.sandbox import Sandbox, SandboxConfig, Session, folders, wire

HEAVY = """
crop = image.crop((1200, 900, 2400, 1800))
small = crop.resize((600, 450))
small.show()
"""
LIGHT = "print(image.size)\n"

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


def in_process(image: Image.Image, code: str) -> Callable[[], object]:
    """`code` run by `exec` here, its shown images and printed text collected as the sandbox
    returns them."""
    code = code.replace("small.show()", "shown.append(small)")

    def call() -> object:
        shown: list[Image.Image] = []
        with contextlib.redirect_stdout(io.StringIO()) as out:
            exec(code, {"image": image, "shown": shown})
        return shown, out.getvalue()

    return call


def in_sandbox(session: Session, code: str) -> Callable[[], object]:
    def call() -> object:
        result = session.run(code)
        if not result.ok:
            raise RuntimeError(result.error)
        return result

    return call


def fresh_process(path: str, out_dir: str) -> Callable[[], object]:
    out = os.path.join(out_dir, "out.png")

    def call() -> object:
        subprocess.run([sys.executable, "-c", FRESH_SCRIPT, path, out], check=True)
        return Image.open(out).convert("RGB")

    return call


def throughput(sandbox: Sandbox, image: Image.Image, calls_per_worker: int) -> float:
    """Heavy calls per second with one session per worker, each calling back to back."""
    sessions = [sandbox.session(images=[image]) for _ in range(sandbox.config.num_workers)]
    for s in sessions:
        s.run(HEAVY)  # warm-up
    loops = [in_sandbox(s, HEAVY) for s in sessions]
    threads = [threading.Thread(target=timed, args=(loop, calls_per_worker, 0)) for loop in loops]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    for s in sessions:
        s.close()
    return len(sessions) * calls_per_worker / elapsed


def row(name: str, times: list[float], floor: list[float]) -> str:
    med, base = statistics.median(times), statistics.median(floor)
    p90 = statistics.quantiles(times, n=10)[-1]
    return (
        f"| {name:<34} | {med * 1e3:7.2f} | {p90 * 1e3:7.2f} | {(med - base) * 1e3:+9.2f} "
        f"| {med / base:6.2f}x |"
    )


def in_fresh_fork(run: Callable[[], float]) -> float:
    """`run()`'s result (a time) in a child forked for it, as a sandbox call runs."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.write(write, struct.pack("d", run()))
        os._exit(0)
    os.close(write)
    (value,) = struct.unpack("d", os.read(read, 8))
    os.close(read)
    os.waitpid(pid, 0)
    return value


def write_pixels(path: str) -> None:
    """The benchmark's input as a session stores it: raw RGBX, the file sized first."""
    with open(path, "wb") as f:
        f.truncate(4000 * 3000 * 4)
        f.write(make_image().tobytes("raw", "RGBX"))


def heavy_child(pixel_file: str, scratch: str, mapped: bool = True) -> Callable[[], float]:
    """The heavy call's code on the input, as a spare runs it after its warm-up
    (`worker.warm_up`), timed from mapping the input on."""
    sys.path.insert(0, os.path.dirname(beacon.sandbox.__file__))
    import child as episode
    import worker

    def run() -> float:
        worker.warm_up(os.pipe()[0], scratch)  # no request comes: the whole warm-up
        start = time.perf_counter()
        image = episode.map_pixels(pixel_file, [4000, 3000])
        if not mapped:
            image = Image.frombytes("RGB", image.size, Path(pixel_file).read_bytes(), "raw", "RGBX")
        in_process(image, HEAVY)()
        return time.perf_counter() - start

    return run


def light_child(scratch: str, rehearsed: bool) -> Callable[[], float]:
    """A light call through the child's own code path (a rehearsal: prepare, run, report) in a
    fresh fork, first thing or after a rehearsal."""
    sys.path.insert(0, os.path.dirname(beacon.sandbox.__file__))
    import child as episode

    def run() -> float:
        if rehearsed:
            episode.rehearse(scratch)
        start = time.perf_counter()
        episode.rehearse(scratch)
        return time.perf_counter() - start

    return run


def collect_child(frozen: bool) -> Callable[[], float]:
    """A full garbage collection in the child, over the objects it shares with its parent
    frozen (`gc.freeze()` in the worker) or not: a collection writes to every object it visits,
    and in a fresh fork each first write copies a page."""

    def run() -> float:
        if not frozen:
            gc.unfreeze()
        start = time.perf_counter()
        gc.collect()
        return time.perf_counter() - start

    return run


def handover_child(folder: str, through_file: bool) -> Callable[[], float]:
    """The heavy call's returned image (600x450 RGB) from a child to this process: written to a
    file in the session's folder and read once, or through two pipes with a relay process (the
    worker) between them; timed from the child's first write to this process holding it."""
    size = 600 * 450 * 3
    path = os.path.join(folder, "returned")

    def run() -> float:
        stamp_r, stamp_w = os.pipe()
        to_relay, child_end = os.pipe()
        parent_end, from_relay = os.pipe()
        if not through_file and os.fork() == 0:  # the relay
            wire.write_all(from_relay, wire.read_exact(to_relay, size))
            os._exit(0)
        if os.fork() == 0:  # the child
            os.write(stamp_w, struct.pack("d", time.perf_counter()))
            if through_file:
                Path(path).write_bytes(bytes(size))
                os.write(stamp_w, b"!")
            else:
                wire.write_all(child_end, bytes(size))
            os._exit(0)
        (start,) = struct.unpack("d", wire.read_exact(stamp_r, 8))
        if through_file:
            wire.read_exact(stamp_r, 1)
            fd = os.open(path, os.O_RDONLY)
            wire.read_exact(fd, size)
            os.close(fd)
            os.unlink(path)
        else:
            wire.read_exact(parent_end, size)
        end = time.perf_counter()
        for fd in (stamp_r, stamp_w, to_relay, child_end, parent_end, from_relay):
            os.close(fd)
        while True:
            try:
                os.wait()
            except ChildProcessError:
                return end - start

    return run


def carried_child(folder: str, save: bool) -> Callable[[], float]:
    """The heavy call's carried images (a 1200x900 crop and its 600x450 resize), pickled into a
    file, as the child saves them after answering, or unpickled from it, as a call that does
    not read them would if it loaded every carried variable."""
    path = os.path.join(folder, "carried.pkl")

    def images() -> dict[str, Image.Image]:
        crop = Image.fromarray(np.random.default_rng(0).integers(0, 256, (900, 1200, 3), np.uint8))
        return {"crop": crop, "small": crop.resize((600, 450))}

    def run() -> float:
        made = images() if save else None
        start = time.perf_counter()
        if made is not None:
            with open(os.path.join(folder, "saved.pkl"), "wb") as f:
                pickle.dump(made, f, protocol=5)
        else:
            pickle.loads(Path(path).read_bytes())
        return time.perf_counter() - start

    in_fresh_fork(lambda: Path(path).write_bytes(pickle.dumps(images(), protocol=5)) and 0.0)
    return run


def seccomp_child() -> float:
    """Compiling the deny-list in the child, as a child would without the worker's copy."""
    sys.path.insert(0, os.path.dirname(beacon.sandbox.__file__))
    import worker

    start = time.perf_counter()
    worker.build_seccomp()
    return time.perf_counter() - start


def probe(calls: int) -> None:
    """`--tricks`' measurements in this process (started by `tricks` with its malloc settings):
    times in ms as JSON, each variant in fresh forks, variants alternating."""
    import cv2  # noqa: F401  (what a worker imports, for the forks' page tables)
    import matplotlib.pyplot  # noqa: F401

    gc.freeze()
    size = 4000 * 3000 * 4  # the input's pixel file, written in a child: this process's heap
    # stays as a worker's, without the large blocks whose freeing would retune glibc's malloc
    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        variants = {}
        huge = os.path.join(tmp, "huge")
        os.mkdir(huge)
        for folder, name in ((tmp, "small pages"), (huge, "huge pages")):
            if name == "huge pages":
                try:
                    folders.mount_tmpfs(huge, f"size={size + (4 << 20)},huge=within_size")
                except OSError:
                    continue
            path = os.path.join(folder, "image.rgbx")
            in_fresh_fork(lambda path=path: write_pixels(path) or 0.0)
            variants[f"heavy, {name}"] = heavy_child(path, tmp)
        variants["heavy, input copied"] = heavy_child(path, tmp, mapped=False)
        variants["light, first in the fork"] = light_child(tmp, rehearsed=False)
        variants["light, after a rehearsal"] = light_child(tmp, rehearsed=True)
        variants["image back, 2 pipes + relay"] = handover_child(tmp, through_file=False)
        variants["image back, through a file"] = handover_child(tmp, through_file=True)
        variants["save carried images"] = carried_child(tmp, save=True)
        variants["load carried images"] = carried_child(tmp, save=False)
        variants["full gc, worker frozen"] = collect_child(frozen=True)
        variants["full gc, worker not frozen"] = collect_child(frozen=False)
        variants["compile the seccomp filter"] = seccomp_child
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(calls):
            for name, run in variants.items():
                times[name].append(in_fresh_fork(run))
        folders.remove_tree(huge)
    print(json.dumps({name: [t * 1e3 for t in ts] for name, ts in times.items()}))


def tricks(calls: int, rounds: int = 5) -> None:
    """The table of `--tricks`: `probe` with the worker's malloc settings and without, the two
    processes in turns (`rounds` each), so that both columns see the same load."""
    from beacon.sandbox.jail import MALLOC_TUNABLES

    columns: list[dict[str, list[float]]] = [{}, {}]
    for _ in range(rounds):
        for column, tunables in zip(columns, (MALLOC_TUNABLES, None), strict=True):
            env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
            env |= {"GLIBC_TUNABLES": tunables} if tunables else {}
            cmd = [sys.executable, __file__, "--probe", "--calls", str(-(-calls // rounds))]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            for name, times in json.loads(out.stdout).items():
                column.setdefault(name, []).extend(times)
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print(f"median ms of {calls} fresh forks each\n")
    print(f"| {'in a fresh fork':<30} | worker's malloc settings | glibc's defaults |")
    print(f"|{'-' * 32}|{'-' * 26}|{'-' * 18}|")
    for name, times in columns[0].items():
        ours, defaults = statistics.median(times), statistics.median(columns[1][name])
        print(f"| {name:<30} | {ours:24.2f} | {defaults:16.2f} |")


def switch(calls: int, gap_s: float) -> None:
    """The table of `--switch`: each call through a sandbox with the speed tricks on and one
    with them off, alternating blocks, `gap_s` apart."""
    image = make_image()
    rows = {}
    with contextlib.ExitStack() as stack:
        sessions = []
        for tricks in (True, False):
            config = SandboxConfig(
                max_calls_per_session=100_000, num_workers=1, speed_tricks=tricks
            )
            sandbox = stack.enter_context(Sandbox(config))
            sessions.append(stack.enter_context(sandbox.session(images=[image])))
        for name, code in (("heavy", HEAVY), ("light", LIGHT)):
            pair = [in_sandbox(session, code) for session in sessions]
            rows[name] = alternating(pair, calls, gap_s=gap_s)
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print(f"median ms of {calls} calls each, {gap_s * 1e3:g} ms apart, 1 worker per sandbox\n")
    print("| call | speed_tricks on | off | off - on | off / on |")
    print("|---|---|---|---|---|")
    for name, (on, off) in rows.items():
        on_ms, off_ms = statistics.median(on) * 1e3, statistics.median(off) * 1e3
        diff, ratio = off_ms - on_ms, off_ms / on_ms
        print(f"| {name} | {on_ms:.2f} | {off_ms:.2f} | {diff:+.2f} | {ratio:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40, help="timed calls per path")
    parser.add_argument("--fresh-calls", type=int, default=10, help="timed calls for (b)")
    parser.add_argument("--gap-ms", type=float, default=20.0, help="idle time before (a'), (c')")
    parser.add_argument("--no-fresh", action="store_true", help="skip (b), the slow row")
    parser.add_argument("--tricks", action="store_true", help="time each speed trick on and off")
    parser.add_argument("--switch", action="store_true", help="calls with the tricks on and off")
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        return probe(args.calls)
    if args.tricks:
        return tricks(args.calls)
    gap = args.gap_ms / 1000
    if args.switch:
        return switch(args.calls, gap)

    image = make_image()
    fresh: list[float] = []
    if not args.no_fresh:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "image.png")
            image.save(path, compress_level=1)
            fresh = timed(fresh_process(path, tmp), args.fresh_calls, 1)
    rows = {}
    with Sandbox(SandboxConfig(max_calls_per_session=100_000)) as sandbox:
        with sandbox.session(images=[image]) as session:
            for name, code in (("heavy", HEAVY), ("light", LIGHT)):
                pair = [in_process(image, code), in_sandbox(session, code)]
                rows[name, "apart"] = alternating(pair, args.calls, gap_s=gap)
                rows[name, "back"] = alternating(pair, args.calls)
        rate = throughput(sandbox, image, args.calls)
        isolation, workers = sandbox.isolation, sandbox.config.num_workers

    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print(f"Python {platform.python_version()}; sandbox: isolation={isolation}, workers={workers}")
    print(f"heavy: {' '.join(HEAVY.split())!r} on 4000x3000; light: {LIGHT.strip()!r}\n")
    print(f"| {'path':<34} | {'med ms':>7} | {'p90 ms':>7} | {'overhead':>9} | {'vs (a)':>7} |")
    print(f"|{'-' * 36}|{'-' * 9}|{'-' * 9}|{'-' * 11}|{'-' * 9}|")
    for name in ("heavy", "light"):
        (a2, c2), (a, c) = rows[name, "apart"], rows[name, "back"]
        print(row(f"{name} (a') in-process, {args.gap_ms:g} ms apart", a2, a2))
        print(row(f"{name} (c') sandbox, {args.gap_ms:g} ms apart", c2, a2))
        print(row(f"{name} (a) in-process, back to back", a, a))
        print(row(f"{name} (c) sandbox, back to back", c, a))
    if fresh:
        print(row("heavy (b) fresh python per call", fresh, rows["heavy", "apart"][1]))
    print()
    heavy = statistics.median(rows["heavy", "apart"][1]) / statistics.median(
        rows["heavy", "apart"][0]
    )
    light = statistics.median(rows["light", "apart"][1]) - statistics.median(
        rows["light", "apart"][0]
    )
    print(f"heavy (c') / (a') = {heavy:.2f}x   (target <= 1.3x)")
    print(f"light (c') - (a') = {light * 1e3:.1f} ms   (target < 15 ms)")
    if fresh:
        ratio = statistics.median(fresh) / statistics.median(rows["heavy", "apart"][1])
        print(f"heavy (b) / (c') = {ratio:.1f}x   (target >= 5x)")
    print(f"throughput, all {workers} workers busy with heavy calls: {rate:.0f} calls/s")


if __name__ == "__main__":
    main()
