"""`beacon serve` as a process: starts, answers over HTTP, and serves the tiny model."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx
import pytest

LAUNCH = "import typer; from beacon.engines.cli import serve; typer.run(serve)"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_serve_command_answers_chat_completions(tiny_dir):
    port = _free_port()
    command = [sys.executable, "-c", LAUNCH, "--model", str(tiny_dir("qwen2_vl"))]
    command += ["--port", str(port), "--served-model-name", "tiny"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):  # the process needs a few seconds to import torch and load
            if process.poll() is not None:
                break
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        assert process.poll() is None, process.stdout.read().decode()
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 3,
            "temperature": 0,
            "return_token_ids": True,
        }
        reply = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60).json()
        assert len(reply["choices"][0]["token_ids"]) == 3
        assert reply["choices"][0]["finish_reason"] == "length"
    finally:
        process.terminate()
        process.wait(timeout=30)
