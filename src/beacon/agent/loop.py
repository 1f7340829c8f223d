"""The one agent loop: generate -> parse a tool call -> execute in the sandbox -> observe -> ...

Evaluation, expert data, GRPO rollouts and ReVuE rollouts all run episodes through `AgentLoop`,
so formats and tool behaviour cannot drift between training and evaluation.

The loop is batched and continuous: up to `max_active` episodes advance together; each step
sends one batch to the engine (which batches or runs requests concurrently), then runs every
pending tool call concurrently in the sandbox, and refills finished slots from the input stream.
A broken image, a sandbox failure or an engine error ends that episode with a recorded reason;
it never stops the others.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from beacon.agent.config import AgentConfig
from beacon.agent.episode import Episode, EpisodeSpec
from beacon.agent.formats import get_format
from beacon.agent.prompts import first_turn
from beacon.engines.base import Engine, GenerationResult
from beacon.images import ImageError, ImageStore, load_image
from beacon.types import ToolCall, Trajectory

if TYPE_CHECKING:
    from beacon.sandbox import Sandbox

logger = logging.getLogger(__name__)


class AgentLoop:
    """Runs episodes of one engine, one sandbox and one agent config."""

    def __init__(
        self,
        engine: Engine,
        sandbox: Sandbox | None,
        config: AgentConfig | None = None,
        store: ImageStore | None = None,
        tool_threads: int = 8,
    ) -> None:
        self.engine = engine
        self.sandbox = sandbox
        self.config = config or AgentConfig()
        self.format = get_format(self.config.format)
        self.store = store
        self._pool = ThreadPoolExecutor(max_workers=tool_threads, thread_name_prefix="beacon-tool")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def __enter__(self) -> AgentLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, specs: Sequence[EpisodeSpec], max_active: int = 32) -> list[Trajectory]:
        """Trajectories in the order of `specs`."""
        done = {id(spec): traj for spec, traj in self.stream(specs, max_active=max_active)}
        return [done[id(spec)] for spec in specs]

    def stream(
        self, specs: Iterable[EpisodeSpec], max_active: int = 32
    ) -> Iterator[tuple[EpisodeSpec, Trajectory]]:
        """Yield (spec, trajectory) as episodes finish, keeping up to `max_active` in flight."""
        pending = iter(specs)
        active: list[tuple[Episode, float, object]] = []
        exhausted = False
        while True:
            while not exhausted and len(active) < max_active:
                spec = next(pending, None)
                if spec is None:
                    exhausted = True
                else:
                    active.append(self._start(spec))
            still = []
            for entry in active:
                if entry[0].done:
                    yield entry[0].spec, self._finalize(*entry)
                else:
                    still.append(entry)
            active = still
            if not active:
                if exhausted:
                    return
                continue
            self._step([episode for episode, _, _ in active], {id(e): s for e, _, s in active})

    # ------------------------------------------------------------------ steps
    def _start(self, spec: EpisodeSpec) -> tuple[Episode, float, object]:
        t0 = time.monotonic()
        episode = Episode(spec, self.format, self.config, self.engine.tokenizer, self.store)
        try:
            images = [load_image(source) for source in spec.sample.images]
        except ImageError as exc:
            episode.fail("input_error", f"image error: {exc}")
            return episode, t0, None
        if spec.tools and self.sandbox is None:
            raise ValueError(
                f"mode {spec.mode!r} runs code but the AgentLoop has no sandbox; pass "
                "Sandbox() or use mode='notool'"
            )
        session, paths = None, []
        if spec.tools:
            try:
                session = self.sandbox.session(images=images)
                paths = list(session.image_paths)
            except Exception as exc:  # a sandbox that cannot start fails this episode only
                logger.warning("sandbox session failed for %s: %s", spec.sample.id, exc)
                episode.fail("sandbox_error", f"sandbox session failed: {exc}")
                return episode, t0, None
        question = spec.question or spec.sample.question
        fmt, tools = self.format, spec.tools
        episode.start(
            first_turn(question, images, fmt=fmt, tools=tools, image_paths=paths, hint=spec.hint),
            images,
        )
        if spec.mode == "hinted":
            original = first_turn(question, images, fmt=fmt, tools=True, image_paths=paths)
            episode.record_original_prompt(original, images)
        return episode, t0, session

    def _step(self, episodes: list[Episode], sessions: dict[int, object]) -> None:
        requests = [episode.request() for episode in episodes]
        try:
            results = self.engine.generate(requests)
        except Exception as exc:  # engines should not raise; if one does, fail this batch only
            logger.exception("engine raised on a batch of %d requests", len(requests))
            results = [
                GenerationResult(
                    text="", finish_reason="error", error=f"{type(exc).__name__}: {exc}"
                )
                for _ in requests
            ]
        for episode, result in zip(episodes, results, strict=True):
            episode.absorb(result)
        calls = [e for e in episodes if e.pending_code is not None]
        list(self._pool.map(lambda e: self._execute(e, sessions[id(e)]), calls))

    def _execute(self, episode: Episode, session: object) -> None:
        parsed = self.format.parse_call(episode.pending_code)
        if parsed.code is None:
            episode.observe(
                ToolCall(code=episode.pending_code, executed=False, error=parsed.error), []
            )
            return
        try:
            result = session.run(parsed.code)
        except Exception as exc:  # the sandbox itself failed, not the model's code
            logger.warning("sandbox failed for %s: %s", episode.spec.sample.id, exc)
            episode.fail("sandbox_error", f"sandbox failed: {type(exc).__name__}: {exc}")
            return
        call = ToolCall(
            code=parsed.code,
            executed=True,
            ok=result.ok,
            error=result.error,
            timed_out=result.timed_out,
            stdout=result.stdout,
            elapsed_s=result.elapsed_s,
        )
        episode.observe(call, list(result.images))

    def _finalize(self, episode: Episode, t0: float, session: object) -> Trajectory:
        if session is not None:
            try:
                session.close()
            except Exception:  # closing is best effort; the trajectory is already complete
                logger.debug("closing a sandbox session failed", exc_info=True)
        trajectory = episode.trajectory
        trajectory.wall_time_s = time.monotonic() - t0
        return trajectory
