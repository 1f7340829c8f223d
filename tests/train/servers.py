"""`beacon serve` processes for the served-rollout tests: started on free loopback ports with an
API key (from BEACON_API_KEY) and weight updates on, as they run beyond one machine; waited on
until healthy; restartable (a restarted server holds the checkpoint's weights again)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
API_KEY = "served-rollouts-test-key"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """One `beacon serve` process of `model` on `port`; `launcher` runs the CLI (`python -m
    beacon`, or `serve_worker.py`: the same server over a scripted-choice engine)."""

    def __init__(self, launcher: Sequence[str], model: Path, port: int, batch_size: int) -> None:
        self.command = [
            *launcher,
            "serve",
            "--model",
            str(model),
            "--port",
            str(port),
            "--served-model-name",
            "beacon",
            "--batch-size",
            str(batch_size),
            "--allow-weight-updates",
        ]
        self.url = f"http://127.0.0.1:{port}/v1"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "OMP_NUM_THREADS": "1",
            "BEACON_API_KEY": API_KEY,
        }
        self.proc = subprocess.Popen(
            self.command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def wait_healthy(self, seconds: float = 180) -> None:
        deadline = time.monotonic() + seconds
        while True:
            assert self.proc is not None and self.proc.poll() is None, f"{self.url} exited"
            assert time.monotonic() < deadline, f"server {self.url} did not start"
            health = self.url.removesuffix("/v1") + "/health"
            try:
                if httpx.get(health, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)

    def restart(self) -> None:
        self.stop()
        self.start()
        self.wait_healthy()


@contextmanager
def beacon_servers(
    model: Path, count: int, launcher: Sequence[str] | None = None, batch_size: int = 8
) -> Iterator[list[Server]]:
    """`count` healthy servers of `model` (plain `python -m beacon` unless `launcher`),
    stopped on exit."""
    launcher = launcher or [sys.executable, "-m", "beacon"]
    servers = [Server(launcher, model, free_port(), batch_size) for _ in range(count)]
    try:
        for server in servers:
            server.start()
        for server in servers:
            server.wait_healthy()
        yield servers
    finally:
        for server in servers:
            server.stop()
