"""LLM judge fallback: ask a model whether a response's answer matches the reference.

Used by `beacon.verify.verify` only when the rules cannot decide (the answer is unreadable, or a
free-text answer fails exact match). The judge runs at temperature 0 through any `Engine`
(normally the `openai` engine pointed at a served model).

Verdicts are cached on disk in SQLite (`<cache_dir>/judge_cache.sqlite`), keyed by a SHA-256 of
(judge model, prompt version, question, answer, reference): changing the judge model or the
prompt version never reuses an old verdict. Only decided verdicts are cached; an engine error
or an unreadable judge reply is returned as undecided and asked again next time. The cache is
safe to share between threads (one connection behind a lock) and between processes (SQLite
WAL mode; the same key written twice keeps the first verdict).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

from beacon.engines.base import Engine, GenerationRequest, SamplingParams

logger = logging.getLogger(__name__)

PROMPTS = {
    "v1": (
        "You are grading an answer to a question about an image. Decide whether the model's "
        "final answer means the same as the reference answer. Ignore formatting, units written "
        "or omitted, and wording; numbers must agree to the precision the reference gives.\n\n"
        "Question: {question}\n"
        "Reference answer: {reference}\n"
        "Model's answer: {answer}\n\n"
        'Reply with one word: "CORRECT" or "INCORRECT".'
    ),
}
_MAX_NEW_TOKENS = 16


@dataclass(frozen=True)
class JudgeResult:
    """One judge decision. `correct` is None when the judge gave no usable verdict."""

    correct: bool | None
    raw: str
    cached: bool = False


def judge_key(
    model_name: str, prompt_version: str, question: str, answer: str, reference: str
) -> str:
    """The cache key: every field that can change the verdict, hashed together."""
    payload = json.dumps([model_name, prompt_version, question, answer, reference])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def parse_judge_reply(text: str) -> bool | None:
    """CORRECT → True, INCORRECT → False; anything else (or both words) → None."""
    words = set(re.findall(r"[a-z]+", text.lower()))
    correct, incorrect = "correct" in words, "incorrect" in words
    if correct == incorrect:
        return None
    return correct


class JudgeCache:
    """SQLite store of judge verdicts by key (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, check_same_thread=False, timeout=30.0)
        with self._lock, self._conn:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, model TEXT, "
                "prompt_version TEXT, correct INTEGER, raw TEXT)"
            )

    def get(self, key: str) -> JudgeResult | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT correct, raw FROM verdicts WHERE key = ?", (key,)
            ).fetchone()
        return None if row is None else JudgeResult(bool(row[0]), row[1], cached=True)

    def put(self, key: str, model: str, prompt_version: str, result: JudgeResult) -> None:
        with self._lock, self._conn:
            self._conn.execute(
                "INSERT OR IGNORE INTO verdicts VALUES (?, ?, ?, ?, ?)",
                (key, model, prompt_version, int(bool(result.correct)), result.raw),
            )

    def __len__(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class Judge:
    """Asks `engine` (model `model_name`) whether an answer matches a reference, with a cache."""

    def __init__(
        self, engine: Engine, model_name: str, cache_dir: Path, prompt_version: str = "v1"
    ) -> None:
        if prompt_version not in PROMPTS:
            raise ValueError(
                f"judge prompt_version={prompt_version!r} is unknown; "
                f"choose one of {sorted(PROMPTS)}."
            )
        self.engine = engine
        self.model_name = model_name
        self.prompt_version = prompt_version
        self.cache = JudgeCache(Path(cache_dir) / "judge_cache.sqlite")

    def __call__(self, question: str, answer: str, reference: str) -> JudgeResult:
        """The verdict for one answer: from the cache, or asked once at temperature 0."""
        key = judge_key(self.model_name, self.prompt_version, question, answer, reference)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        prompt = PROMPTS[self.prompt_version].format(
            question=question, answer=answer, reference=reference
        )
        request = GenerationRequest(
            messages=[{"role": "user", "content": prompt}],
            sampling=SamplingParams(
                temperature=0.0, max_new_tokens=_MAX_NEW_TOKENS, logprobs=False
            ),
        )
        reply = self.engine.generate([request])[0]
        if reply.finish_reason == "error":
            logger.warning("judge %s failed: %s", self.model_name, reply.error)
            return JudgeResult(None, reply.error or "engine error")
        result = JudgeResult(parse_judge_reply(reply.text), reply.text)
        if result.correct is None:
            logger.warning("judge %s gave no verdict: %r", self.model_name, reply.text[:200])
        else:
            self.cache.put(key, self.model_name, self.prompt_version, result)
        return result

    def close(self) -> None:
        """Close the verdict cache's SQLite connection."""
        self.cache.close()
