"""A batching queue: asyncio callers submit single requests, one worker thread runs whatever is
pending through a blocking `generate` as one batch.

This is how in-process engines (`hf`, `vllm`) serve many independent episodes at once: each
episode awaits its own request, and the engine still sees batches, of every request that arrived
while the previous batch ran. `beacon serve` uses the same queue for its HTTP requests.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from beacon.engines.base import GenerationRequest, GenerationResult

logger = logging.getLogger(__name__)

GenerateFn = Callable[[Sequence[GenerationRequest]], list[GenerationResult]]


@dataclass
class _Job:
    request: GenerationRequest
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future


class BatchingQueue:
    """Runs submitted requests through `generate` in batches of up to `max_batch`.

    The worker takes the first waiting request, then everything else already queued (waiting up
    to `wait_s` more for stragglers), and runs them as one call. Results go back to each
    caller's event loop, so callers on different loops and threads may share one queue.
    """

    def __init__(
        self, generate: GenerateFn, max_batch: int, wait_s: float = 0.0, name: str = "batcher"
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch={max_batch} must be at least 1")
        self.generate, self.max_batch, self.wait_s = generate, max_batch, wait_s
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name=f"beacon-{name}", daemon=True)
        self._thread.start()

    async def submit(self, request: GenerationRequest) -> GenerationResult:
        """The result of one request, generated in a batch with whatever else is pending."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put(_Job(request, loop, future))
        return await future

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Results in request order."""
        return list(await asyncio.gather(*(self.submit(r) for r in requests)))

    def close(self) -> None:
        """Stop the worker after the requests already queued."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout=60)

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            jobs, stopping = self._gather(job)
            self._run(jobs)
            if stopping:
                return

    def _gather(self, first: _Job) -> tuple[list[_Job], bool]:
        """The first job and every pending one (up to max_batch); True when close() was asked."""
        jobs = [first]
        deadline = time.monotonic() + self.wait_s
        while len(jobs) < self.max_batch:
            try:
                remaining = deadline - time.monotonic()
                job = (
                    self._queue.get(timeout=remaining)
                    if remaining > 0
                    else self._queue.get_nowait()
                )
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            jobs.append(job)
        return jobs, False

    def _run(self, jobs: list[_Job]) -> None:
        try:
            results = self.generate([j.request for j in jobs])
        except Exception as exc:  # engines should not raise; if one does, these requests fail
            logger.exception("generate raised on a batch of %d requests", len(jobs))
            results = [GenerationResult.failed(exc) for _ in jobs]
        for job, result in zip(jobs, results, strict=True):
            try:
                job.loop.call_soon_threadsafe(_resolve, job.future, result)
            except RuntimeError:  # the caller's loop is closed: nobody waits for this result
                logger.debug("dropping a result for a closed event loop")


def _resolve(future: asyncio.Future, result: GenerationResult) -> None:
    if not future.done():
        future.set_result(result)
