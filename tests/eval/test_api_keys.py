"""API keys reach the servers and never the run folder; hosted APIs work from `beacon eval`.

The policy and the judge are local servers that behave like a hosted API: each wants its own
Bearer key (401 otherwise) and refuses any request field the public OpenAI API does not define.
The policy writes code that prints the sandbox's whole environment, so a key that reached model
code would land in trajectories.jsonl. After each run every file of the run folder is searched
for the keys' bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from beacon.cli import app
from beacon.engines.scripted_server import ChatReply, chat_app
from beacon.engines.serve import run_app_in_thread

POLICY_KEY = "sk-policy-6d1f0c9a2b7e4f13"
JUDGE_KEY = "sk-judge-93a8e5b1c0d24f76"
CODE = "<code>\n```python\nimport os\nprint(dict(os.environ))\n```\n"
runner = CliRunner()


@dataclass
class Servers:
    """The policy's and the judge's base URLs, and the bodies each answered (past its key)."""

    policy: str
    judge: str
    policy_bodies: list[dict] = field(default_factory=list)
    judge_bodies: list[dict] = field(default_factory=list)


def _texts(messages: list[dict]) -> str:
    parts = []
    for message in messages:
        content = message.get("content")
        items = content if isinstance(content, list) else [{"text": content}]
        parts += [str(item.get("text", "")) for item in items]
    return "\n".join(parts)


@pytest.fixture()
def servers() -> Iterator[Servers]:
    bodies: dict[str, list[dict]] = {"policy": [], "judge": []}

    def policy(body: dict) -> ChatReply:
        bodies["policy"].append(body)
        if "<sandbox_output>" in _texts(body["messages"]):
            return ChatReply("<answer>zzz</answer>", "</answer>")  # a wrong text answer
        return ChatReply(CODE, "</code>")

    def judge(body: dict) -> str:
        bodies["judge"].append(body)
        return "CORRECT"

    hosted = {"openai_fields_only": True}
    policy_server = run_app_in_thread(chat_app(policy, "policy", api_key=POLICY_KEY, **hosted))
    judge_server = run_app_in_thread(chat_app(judge, "judge-1", api_key=JUDGE_KEY, **hosted))
    try:
        yield Servers(
            policy_server.base_url,
            judge_server.base_url,
            bodies["policy"],
            bodies["judge"],
        )
    finally:
        policy_server.stop()
        judge_server.stop()


def _eval(servers: Servers, out: Path, *extra: str):
    """`beacon eval` of one small_text item in tool mode, the rules' undecided answers judged."""
    args = ["eval", "--engine", "openai", "--model", "policy", "--base-url", servers.policy,
            "--bench", "synth", "--limit", "1", "--modes", "tool", "--out", str(out),
            "--no-progress", "--set", "judge.model=judge-1",
            "--set", f"judge.base_url={servers.judge}", "--set", "judge.api_key_env=JUDGE_KEY",
            "--set", "bootstrap=0", *extra]  # fmt: skip
    return runner.invoke(app, args)


def _files_holding(folder: Path, *secrets: str) -> list[str]:
    return [
        f"{path}: {secret}"
        for path in sorted(folder.rglob("*"))
        if path.is_file()
        for secret in secrets
        if secret.encode() in path.read_bytes()
    ]


@pytest.fixture()
def keys_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("JUDGE_KEY", JUDGE_KEY)
    return monkeypatch


def _check_run(out: Path, servers: Servers) -> None:
    records = [json.loads(line) for line in (out / "samples.jsonl").open()]
    assert len(records) == 1 and records[0]["tool_calls"] == 1, records
    assert records[0]["verdict_source"] == "judge" and records[0]["correct"], records[0]
    assert servers.policy_bodies and servers.judge_bodies, "both keys were taken"
    assert "PATH" in (out / "trajectories.jsonl").read_text(), "the environment was printed"
    assert _files_holding(out, POLICY_KEY, JUDGE_KEY) == []


def test_a_key_given_with_api_key_is_used_and_never_written(
    servers: Servers, tmp_path: Path, keys_env: pytest.MonkeyPatch
) -> None:
    result = _eval(servers, tmp_path / "run", "--api-key", POLICY_KEY)
    assert result.exit_code == 0, result.output
    _check_run(tmp_path / "run", servers)


def test_a_key_in_the_environment_is_used_and_never_written(
    servers: Servers, tmp_path: Path, keys_env: pytest.MonkeyPatch
) -> None:
    keys_env.setenv("POLICY_KEY", POLICY_KEY)
    result = _eval(servers, tmp_path / "run", "--set", "engine.api_key_env=POLICY_KEY")
    assert result.exit_code == 0, result.output
    _check_run(tmp_path / "run", servers)


def test_a_run_without_the_key_is_refused_by_the_server(
    servers: Servers, tmp_path: Path, keys_env: pytest.MonkeyPatch
) -> None:
    """The servers really check the key: without it no episode gets a reply."""
    result = _eval(servers, tmp_path / "run")
    assert result.exit_code == 1 and not servers.policy_bodies
    assert "401" in (tmp_path / "run" / "errors.jsonl").read_text()


@pytest.mark.parametrize("setting", ["engine.api_key", "judge.api_key"])
def test_a_key_given_as_a_setting_is_refused_with_the_way_to_pass_it(
    servers: Servers, tmp_path: Path, keys_env: pytest.MonkeyPatch, setting: str
) -> None:
    result = _eval(servers, tmp_path / "run", "--set", f"{setting}={POLICY_KEY}")
    assert result.exit_code != 0
    message = str(result.exception) + result.output
    assert "api_key is not a setting" in message and "api_key_env" in message
    assert POLICY_KEY not in message, "the refusal must not repeat the key"
    assert not (tmp_path / "run").exists() and not servers.policy_bodies


def test_a_key_pasted_as_the_variable_name_is_refused_unrepeated(
    servers: Servers, tmp_path: Path, keys_env: pytest.MonkeyPatch
) -> None:
    result = _eval(servers, tmp_path / "run", "--set", f"engine.api_key_env={POLICY_KEY}")
    assert result.exit_code != 0
    message = str(result.exception) + result.output
    assert "name of an environment variable" in message and POLICY_KEY not in message
    assert not (tmp_path / "run").exists()


def test_beacon_run_takes_api_key_too(
    servers: Servers, tmp_path: Path, keys_env: pytest.MonkeyPatch
) -> None:
    from PIL import Image

    image = tmp_path / "img.png"
    Image.new("RGB", (64, 48), "white").save(image)
    args = ["run", "--image", str(image), "--question", "Code?", "--engine", "openai",
            "--model", "policy", "--base-url", servers.policy]  # fmt: skip
    result = runner.invoke(app, [*args, "--api-key", POLICY_KEY])
    assert result.exit_code == 0, result.output
    assert "zzz" in result.output and POLICY_KEY not in result.output
    refused = runner.invoke(app, [*args, "--engine", "hf", "--model", "tiny", "--api-key", "k"])
    assert refused.exit_code != 0 and "--api-key is for a server" in str(refused.exception)
