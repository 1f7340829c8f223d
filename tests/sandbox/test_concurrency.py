"""Many sessions at once from threads: every result belongs to the session that asked for it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from PIL import Image

from beacon.sandbox import Sandbox

SESSIONS = 24
CALLS = 4


def run_episode(sandbox: Sandbox, n: int) -> list[tuple[str, int, tuple[int, int]]]:
    """One episode whose image, variables and output all carry the number n."""
    img = Image.fromarray(np.full((10 + n, 20 + n, 3), n, np.uint8))
    seen = []
    with sandbox.session(images=[img]) as s:
        assert s.run(f"tag = {n}\ntotal = 0").ok
        for call in range(CALLS):
            r = s.run(
                f"total += {call}\nprint(tag, total, image.getpixel((0, 0))[0])\n"
                "image.crop((0, 0, 4 + tag, 5 + tag)).show()"
            )
            assert r.ok, r.error
            seen.append((r.stdout, int(np.asarray(r.images[0])[0, 0, 0]), r.images[0].size))
    return seen


def test_parallel_sessions_never_mix_results(sandbox: Sandbox) -> None:
    with ThreadPoolExecutor(max_workers=12) as pool:
        results = list(pool.map(lambda n: run_episode(sandbox, n), range(SESSIONS)))
    for n, seen in enumerate(results):
        expected = [
            (f"{n} {sum(range(call + 1))} {n}\n", n, (4 + n, 5 + n)) for call in range(CALLS)
        ]
        assert seen == expected
