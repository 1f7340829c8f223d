"""Critic requests in the background: one asyncio loop in a thread, so the trainer keeps scoring.

`CriticRunner.submit` schedules `ask_critic` for one group on the runner's loop and returns a
`concurrent.futures.Future`; the trainer submits every group of a step, runs the base teacher
meanwhile, then collects the replies (Algorithm 1: the critic is a separate service). Every raw
exchange goes to the run's `critic.jsonl` with the step and group. `ask_critic` never raises, so
a future always holds a `CriticReply`.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from pathlib import Path

from beacon.revue import CriticReply, CriticRequest, RevueConfig, ask_critic
from beacon.revue.critic import Sender
from beacon.revue.http import ExchangeLog
from beacon.runfolder import CRITIC_LOG


class CriticRunner:
    """Runs critic requests on a private event loop thread."""

    def __init__(self, send: Sender, cfg: RevueConfig, run_dir: Path) -> None:
        self.send = send
        self.cfg = cfg
        self.log = ExchangeLog(run_dir / CRITIC_LOG)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="beacon-critic", daemon=True
        )
        self._thread.start()

    def submit(self, request: CriticRequest, step: int, group: int) -> Future[CriticReply]:
        coroutine = ask_critic(
            request,
            self.send,
            retries=self.cfg.critic_retries,
            timeout_s=self.cfg.critic_timeout_s,
            on_exchange=self.log.writer(step=step, group=group),
        )
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def close(self) -> None:
        aclose = getattr(self.send, "aclose", None)
        if aclose is not None:
            asyncio.run_coroutine_threadsafe(aclose(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.log.close()
