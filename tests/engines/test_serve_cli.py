"""`beacon serve` as a process: starts, answers over HTTP, and serves the tiny model."""

from __future__ import annotations

import os
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
    """With the key from BEACON_API_KEY: refused without it, answered with it."""
    port = _free_port()
    command = [sys.executable, "-c", LAUNCH, "--model", str(tiny_dir("qwen2_vl"))]
    command += ["--port", str(port), "--served-model-name", "tiny"]
    env = {**os.environ, "BEACON_API_KEY": "cli-key"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
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
        url = f"{base}/v1/chat/completions"
        assert httpx.post(url, json=body, timeout=60).status_code == 401
        headers = {"Authorization": "Bearer cli-key"}
        reply = httpx.post(url, json=body, headers=headers, timeout=60).json()
        assert len(reply["choices"][0]["token_ids"]) == 3
        assert reply["choices"][0]["finish_reason"] == "length"
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.parametrize(
    ("host", "key", "warned"),
    [("0.0.0.0", None, True), ("0.0.0.0", "k", False), ("127.0.0.1", None, False)],
)
def test_listening_beyond_loopback_without_a_key_warns(tmp_path, host, key, warned):
    """The warning comes before the model loads (here it fails to: no server ever listens)."""
    command = [sys.executable, "-c", LAUNCH, "--model", str(tmp_path / "no-model")]
    command += ["--host", host, "--port", str(_free_port())]
    env = {k: v for k, v in os.environ.items() if k != "BEACON_API_KEY"}
    if key is not None:
        env["BEACON_API_KEY"] = key
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode != 0  # the model does not exist
    assert ("WARNING: listening on 0.0.0.0 without an API key" in done.stderr) == warned
