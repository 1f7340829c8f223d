"""Is a trajectory what the engine sampled? Checked before any trainer trains on it.

A trainer trains on the ids and images a trajectory records; the policy was sampled on what the
engine saw. When the two differ (images lost or misaligned between turns, another image
processor, a server that rendered the chat again from text, a record altered on the way), the
loss is computed on a sequence the policy never produced, and nothing else notices. So
`check_trajectory` compares, and a trajectory that fails is dropped and counted by reason:

- `image_count`: the image-token runs in the ids, the trajectory's image keys and the images
  the engine had at each call (`EngineView.images`) agree;
- `image_tokens`: each image's run is as long as the trainer's image processor makes it (the
  grid t·h·w / merge², so the training forward's pixel grid and M-RoPE positions are the
  engine's);
- `image_missing`: an image key the trainer cannot load;
- `token_ids`: the ids up to the end of each engine call have the length and fingerprint the
  engine reported (`EngineView`): no re-tokenisation drift.

What is not covered: a trajectory without token ids (a text-only engine; training tokenizes it
itself) is not checked; calls whose engine reported no context ids are checked for images only;
a grid with the same token count but another shape (h and w swapped) passes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from beacon.types import Trajectory, ids_fingerprint

CHECK_REASONS = ("image_count", "image_tokens", "image_missing", "token_ids")
"""Why a trajectory was dropped before training, in the order the checks run."""


@dataclass(frozen=True)
class Inconsistency:
    """Why a trajectory cannot be trained on: one of `CHECK_REASONS`, and what differed."""

    reason: str
    detail: str


TrajectoryCheck = Callable[[Trajectory], Inconsistency | None]
"""A check a trainer hands to `Rollouts`: None when the trajectory may be trained on."""


def check_trajectory(
    traj: Trajectory, image_token_id: int | None, image_tokens: Callable[[str], int] | None = None
) -> Inconsistency | None:
    """The first inconsistency of `traj` (module docstring), or None.

    `image_token_id` is the tokenizer's image pad id; `image_tokens(key)` the number of tokens
    the trainer's processor makes of image `key` (None: run lengths are not checked).
    """
    if not traj.has_token_ids:
        return None
    found = _engine_calls(traj)
    if found is not None:
        return found
    ids = traj.token_ids
    keys = [key for segment in traj.segments for key in segment.images]
    runs = image_runs(ids, image_token_id)
    if len(runs) != len(keys):
        return Inconsistency(
            "image_count", f"{len(runs)} image-token runs in the ids but {len(keys)} images"
        )
    if image_tokens is not None:
        return _run_lengths(runs, keys, image_tokens)
    return None


def _engine_calls(traj: Trajectory) -> Inconsistency | None:
    """Compare the trajectory with what the engine reported at the end of each call."""
    ids: list[int] = []
    images = 0
    for segment in traj.segments:
        ids.extend(segment.token_ids)
        images += len(segment.images)
        view = segment.engine
        if view is None:
            continue
        if view.images != images:
            return Inconsistency(
                "image_count",
                f"the engine had {view.images} images at token {view.tokens}, the trajectory "
                f"holds {images} there",
            )
        if view.tokens != len(ids) or view.fingerprint != ids_fingerprint(ids):
            return Inconsistency(
                "token_ids",
                f"the engine's {view.tokens} ids of a call differ from the trajectory's "
                f"{len(ids)} (re-tokenised or altered)",
            )
    return None


def _run_lengths(
    runs: list[int], keys: list[str], image_tokens: Callable[[str], int]
) -> Inconsistency | None:
    for index, (run, key) in enumerate(zip(runs, keys, strict=True)):
        try:
            expected = image_tokens(key)
        except (KeyError, OSError, ValueError) as exc:
            return Inconsistency("image_missing", f"image {index} ({key}): {exc}")
        if run != expected:
            return Inconsistency(
                "image_tokens",
                f"image {index} has {run} tokens in the ids but the trainer's processor makes "
                f"{expected}",
            )
    return None


def image_runs(ids: list[int], image_token_id: int | None) -> list[int]:
    """Lengths of the runs of `image_token_id` in `ids`, in order (one run per image)."""
    runs: list[int] = []
    previous = None
    for token in ids:
        if token == image_token_id:
            if previous == image_token_id:
                runs[-1] += 1
            else:
                runs.append(1)
        previous = token
    return runs
