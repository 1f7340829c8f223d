"""The one agent loop: generate -> parse a tool call -> execute in the sandbox -> observe -> ...

Evaluation, expert data, GRPO rollouts and ReVuE rollouts all run episodes through `AgentLoop`,
so formats and tool behaviour cannot drift between training and evaluation.

Every episode is its own asyncio task (`run_episode`): against a server, an episode's next turn
is requested as soon as its tool call returns, never after the slowest episode of a batch.
Engines with an `agenerate` coroutine (`openai`, `hf`) are awaited directly; the `hf` engine's
batching queue still runs whatever requests are pending as one batch, so in-process batching
stays. Any other engine's blocking `generate` is put behind a `BatchingQueue` here. For
in-process engines the loop also holds a turn's requests until the episodes that will ask soon
have asked (`beacon.agent.gather`), so a group's turns run as one batch, not as it trickles in.
Blocking work (image loading, sandbox sessions and calls, tokenizing observations) runs in a
thread pool, off the event loop, so other episodes keep generating meanwhile. A finished
episode's sandbox session is closed there too, without the episode waiting for it. For a
remote engine the trajectory's records of the prompt and of each observation (image keys and
store files, token ids) are made there while the server generates the turn that follows them
(`EpisodeState` with `defer_records`): the server needs only the messages.

`astream` keeps up to `max_active` episodes in flight and yields them as they finish; `stream`
and `run` are its synchronous wrappers (the event loop runs in a helper thread). A broken image,
a sandbox failure or an engine error ends that episode with a recorded reason; it never stops
the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import queue
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from beacon.agent.config import AgentConfig
from beacon.agent.episode import EpisodeSpec, EpisodeState
from beacon.agent.formats import get_format
from beacon.agent.gate import GateError, ToolGate
from beacon.agent.gather import HoldCap, TurnGather
from beacon.agent.prompts import first_turn
from beacon.engines.base import Engine, GenerationRequest, GenerationResult
from beacon.engines.batching import BatchingQueue
from beacon.images import ImageError, ImageStore, load_image
from beacon.types import ToolCall, Trajectory

if TYPE_CHECKING:
    from beacon.sandbox import Sandbox

logger = logging.getLogger(__name__)

AsyncGenerate = Callable[[Sequence[GenerationRequest]], Awaitable[list[GenerationResult]]]
_FALLBACK_BATCH = 256  # batch limit for engines without `batch_size` or `agenerate`


class AgentLoop:
    """Runs episodes of one engine, one sandbox and one agent config."""

    def __init__(
        self,
        engine: Engine,
        sandbox: Sandbox | None,
        config: AgentConfig | None = None,
        store: ImageStore | None = None,
        tool_threads: int = 8,
        gate: ToolGate | None = None,
    ) -> None:
        self.engine = engine
        self.sandbox = sandbox
        self.config = config or AgentConfig()
        self.format = get_format(self.config.format)
        self.store = store
        self.gate = gate  # gated mode; None: the policy scores p_tool (built on first use)
        self._pool = ThreadPoolExecutor(max_workers=tool_threads, thread_name_prefix="beacon-tool")
        self._queue: BatchingQueue | None = None
        self._agenerate: AsyncGenerate = getattr(engine, "agenerate", None) or self._queued
        # per event loop (`stream` runs each call on its own); None for remote engines
        self._gathers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, TurnGather] = (
            weakref.WeakKeyDictionary()
        )
        self._hold = None if getattr(engine, "remote", False) else HoldCap()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        if self._queue is not None:
            self._queue.close()

    def __enter__(self) -> AgentLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------- sync API
    def run(self, specs: Sequence[EpisodeSpec], max_active: int = 32) -> list[Trajectory]:
        """Trajectories in the order of `specs`."""
        done = {id(spec): traj for spec, traj in self.stream(specs, max_active=max_active)}
        return [done[id(spec)] for spec in specs]

    def stream(
        self, specs: Iterable[EpisodeSpec], max_active: int = 32
    ) -> Iterator[tuple[EpisodeSpec, Trajectory]]:
        """Yield (spec, trajectory) as episodes finish, keeping up to `max_active` in flight.

        A thin wrapper over `astream`, whose event loop runs in a helper thread; `specs` is
        consumed from that thread. Closing the iterator early cancels the running episodes.
        """
        handoff: queue.Queue[Any] = queue.Queue()
        loop = asyncio.new_event_loop()

        async def produce() -> None:
            async for pair in self.astream(specs, max_active=max_active):
                handoff.put(pair)

        task = loop.create_task(produce())
        thread = threading.Thread(
            target=_drive, args=(loop, task, handoff), name="beacon-agent-loop", daemon=True
        )
        thread.start()
        try:
            while (item := handoff.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            if thread.is_alive():
                with contextlib.suppress(RuntimeError):  # the loop finished meanwhile
                    loop.call_soon_threadsafe(task.cancel)
            thread.join()

    # ------------------------------------------------------------ async API
    async def astream(
        self, specs: Iterable[EpisodeSpec], max_active: int = 32
    ) -> AsyncIterator[tuple[EpisodeSpec, Trajectory]]:
        """Yield (spec, trajectory) as episodes finish, each episode its own task."""
        if max_active < 1:
            raise ValueError(f"max_active={max_active} must be at least 1 (eval: concurrency)")
        pending = iter(specs)
        running: set[asyncio.Task] = set()
        freeze = self.config.freeze_heap
        if freeze:
            _freeze_heap()
        try:
            while True:
                while len(running) < max_active and (spec := next(pending, None)) is not None:
                    running.add(asyncio.create_task(self._paired(spec)))
                if not running:
                    return
                finished, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in finished:
                    yield task.result()
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)
            if freeze:
                _thaw_heap()

    async def run_episode(self, spec: EpisodeSpec) -> Trajectory:
        """Run one episode to its end and return its trajectory."""
        if spec.tools and self.sandbox is None:
            raise ValueError(
                f"mode {spec.mode!r} runs code but the AgentLoop has no sandbox; pass "
                "Sandbox() or use mode='notool'"
            )
        start = time.monotonic()
        gather = self._gather()
        if gather is not None:
            gather.join()
        session = None
        try:
            if spec.mode == "gated":
                state, session = await self._open_gated(spec)
            else:
                state, session = await self._blocking(self._open, spec)
            opening = session  # its folder and files are made while the first turn is out
            while not state.done:
                state.absorb(await self._turn(state, gather, opening))
                opening = None
                if state.pending_call is not None:
                    await self._blocking(self._execute, state, session)
            if (records := state.take_records()) is not None:
                await self._blocking(records)
        finally:
            if gather is not None:
                gather.leave()
            if session is not None:
                # Not awaited: the trajectory is complete, and the unmount and process sweep
                # (~10 ms) would add to every episode's latency. `close()` waits for the pool.
                self._pool.submit(_close_session, session)
        state.trajectory.wall_time_s = time.monotonic() - start
        return state.trajectory

    # ---------------------------------------------------------------- steps
    async def _turn(
        self, state: EpisodeState, gather: TurnGather | None, opening: Any
    ) -> GenerationResult:
        """One request. While it is out, the session `opening` (first turn) stores its inputs and
        the state's deferred records run, in the pool; the request is built and sent first, as
        none of that work is needed before the reply."""
        generation = asyncio.ensure_future(self._generate(state.request(), gather))
        try:
            await asyncio.sleep(0)  # one step of `generation`: the request is built and sent
            if opening is not None:
                self._pool.submit(_open_session, opening)
            records = state.take_records()
            recording = None if records is None else self._in_pool(records)
            result = await generation
            if recording is not None:
                await recording
            return result
        finally:
            generation.cancel()  # only if this episode was cancelled meanwhile

    async def _paired(self, spec: EpisodeSpec) -> tuple[EpisodeSpec, Trajectory]:
        return spec, await self.run_episode(spec)

    async def _blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await self._in_pool(fn, *args)

    def _in_pool(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future:
        """`fn(*args)` started in the thread pool now; await the future for its result."""
        return asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _queued(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """`generate` of an engine without `agenerate`, batched across episodes."""
        if self._queue is None:
            batch = getattr(self.engine, "batch_size", _FALLBACK_BATCH)
            self._queue = BatchingQueue(self.engine.generate, batch, name="agent-batcher")
        return await self._queue.agenerate(requests)

    def _gather(self) -> TurnGather | None:
        """This event loop's turn gatherer (None for a remote engine: see `beacon.agent.gather`)."""
        if self._hold is None:
            return None
        loop = asyncio.get_running_loop()
        if loop not in self._gathers:
            self._gathers[loop] = TurnGather(self._agenerate, self._hold)
        return self._gathers[loop]

    async def _generate(
        self, request: GenerationRequest, gather: TurnGather | None
    ) -> GenerationResult:
        if gather is not None:
            return await gather.generate(request)
        try:
            (result,) = await self._agenerate([request])
        except Exception as exc:  # engines should not raise; if one does, fail this episode
            logger.exception("engine raised on a request")
            return GenerationResult.failed(exc)
        return result

    def _open(self, spec: EpisodeSpec) -> tuple[EpisodeState, Any]:
        """Load the images, make the (deferred) sandbox session and start the episode's state
        with its opening messages (in a thread)."""
        state = EpisodeState(
            spec,
            self.format,
            self.config,
            self.engine.tokenizer,
            self.store,
            defer_records=self._hold is None,  # a remote engine takes messages, not token ids
        )
        try:
            images = [load_image(source) for source in spec.sample.images]
        except ImageError as exc:
            state.fail("input_error", f"image error: {exc}")
            return state, None
        session, paths = None, []
        if spec.tools:
            try:
                # deferred: the paths now, the folder and files while the model writes its
                # first turn (`run_episode`): ~5 ms off an episode's start at c=1
                session = self.sandbox.session(images=images, deferred=True)
                paths = list(session.image_paths)
            except Exception as exc:  # a sandbox that cannot start fails this episode only
                logger.warning("sandbox session failed for %s: %s", spec.sample.id, exc)
                state.fail("sandbox_error", f"sandbox session failed: {exc}")
                return state, None
        question = spec.question or spec.sample.question
        fmt, tools = self.format, spec.tools
        state.start(
            first_turn(question, images, fmt=fmt, tools=tools, image_paths=paths, hint=spec.hint),
            images,
        )
        if spec.mode == "hinted":
            original = first_turn(question, images, fmt=fmt, tools=True, image_paths=paths)
            state.record_original_prompt(original, images)
        return state, session

    async def _open_gated(self, spec: EpisodeSpec) -> tuple[EpisodeState, Any]:
        """Gated mode: open the tool episode, score p_tool on its opening context, then keep
        it or open the notool episode instead (`beacon.agent.gate`)."""
        state, session = await self._blocking(self._open, replace(spec, mode="tool"))
        if state.done:  # an unreadable image or no sandbox session: nothing to gate
            return state, session
        try:
            decision = await self._gate().decide(state.messages, state.images)
        except GateError as exc:
            state.fail("engine_error", str(exc))
            return state, session
        if decision.path == "notool":
            await self._blocking(_close_session, session)
            state, session = await self._blocking(self._open, replace(spec, mode="notool"))
        state.trajectory.gate = decision
        return state, session

    def _gate(self) -> ToolGate:
        """The gate passed in, else the policy's own, built on the first gated episode."""
        if self.gate is None:
            if self.config.gate.engine is not None:
                raise ValueError(
                    "agent.gate.engine is set, so the gate model must be built by the caller: "
                    "pass AgentLoop(..., gate=ToolGate(build_engine(config.gate.engine), ...))"
                )
            self.gate = ToolGate(self.engine, self.format, self.config.gate.threshold)
        return self.gate

    def _execute(self, state: EpisodeState, session: Any) -> None:
        """Run the pending call in the sandbox and append what it reported (in a thread)."""
        written = state.pending_call
        parsed = self.format.parse_call(written)
        if parsed.code is None:
            state.observe(ToolCall(code=written, executed=False, error=parsed.error), [])
            return
        try:
            result = session.run(parsed.code)
        except Exception as exc:  # the sandbox itself failed, not the model's code
            logger.warning("sandbox failed for %s: %s", state.spec.sample.id, exc)
            state.fail("sandbox_error", f"sandbox failed: {type(exc).__name__}: {exc}")
            return
        call = ToolCall(
            code=parsed.code,
            executed=True,
            ok=result.ok,
            error=result.error,
            timed_out=result.timed_out,
            stdout=result.stdout,
            elapsed_s=result.elapsed_s,
            executed_code=result.code or parsed.code,
            repairs=list(result.repairs),
            notes=list(result.notes),
            image_crops=list(result.image_crops or [None] * len(result.images)),
        )
        state.observe(call, list(result.images))


_END = object()
_streams = 0  # streams running in this process (threads each run their own)
_streams_lock = threading.Lock()


def _freeze_heap() -> None:
    """While episodes stream, the objects alive when the first stream started (modules,
    tokenizer, engine, model) are out of the garbage collector's reach (`gc.freeze`).

    Episodes make many container objects, and every so often Python then walks the whole heap
    in a full collection with every thread stopped (`benchmarks/agent_gc_freeze.py` times it on
    and off; `AgentConfig.freeze_heap` is the switch). `_thaw_heap` gives the objects back
    when the last stream ends, so nothing that died meanwhile (a model dropped between two
    evaluations, in a reference cycle) stays for good.
    """
    global _streams
    with _streams_lock:
        _streams += 1
        if _streams == 1:
            gc.freeze()


def _thaw_heap() -> None:
    global _streams
    with _streams_lock:
        _streams -= 1
        if _streams == 0:
            gc.unfreeze()


def _drive(loop: asyncio.AbstractEventLoop, task: asyncio.Task, handoff: queue.Queue) -> None:
    """Run `task` to its end on `loop` (in a helper thread); errors go to the consumer."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(task)
    except BaseException as exc:  # handed to the consumer, which re-raises it
        handoff.put(exc)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
            handoff.put(_END)


def _open_session(session: Any) -> None:
    """Store a deferred session's inputs; a failure is raised again by its first call, which
    fails the episode (`_execute`), so here it is only logged."""
    try:
        session.open()
    except Exception:
        logger.debug("opening a sandbox session failed", exc_info=True)


def _close_session(session: Any) -> None:
    try:
        session.close()
    except Exception:  # closing is best effort; the trajectory is already complete
        logger.debug("closing a sandbox session failed", exc_info=True)
