"""Weight pushes into a serving model: the payload, the client that sends it, and the checks
before any tensor is copied.

A push is the trainer's state dict as safetensors bytes (contiguous CPU copies, so tied weights
travel as two entries), POSTed as `application/octet-stream` to `beacon serve`'s
`/beacon/update_weights` (servers started with `--allow-weight-updates`) by `push_weights`; a
server that refuses is an error naming it, since a stale server would sample from an old policy.

At real size a push is neither fp32 nor one body. The pusher first asks the server for its
weights (`GET /beacon/weights`: name, shape, dtype of each) and casts every tensor to the
server's dtype on the trainer's side (a bf16 server takes bf16 only: the body cap is summed
from its own dtypes), then splits the push into chunks of at most `chunk_bytes` of tensors
(`chunk_names`; a tensor larger than that travels alone, tensors are never split), each a body
of its own with `?push=<id>&chunk=<i>&chunks=<n>`.

A push replaces the policy every later request samples from, so a bad one must change nothing:
`weight_problems` looks at every tensor — every name a parameter of the model, every shape equal
(`copy_` would broadcast a 1-element tensor over a whole matrix), optionally every dtype equal,
every value finite — and `PushAssembler` holds the chunks of a push on the server until the last
one arrived, refusing the whole push at the first bad chunk, a name sent twice, or a chunk out of
order; only a complete, clean push reaches the engine, which copies it under its generation lock.
A push left unfinished (a trainer that crashed between chunks) is discarded when the next push
begins, never applied.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from beacon.engines.http import HttpClient, Retryable

logger = logging.getLogger(__name__)

MAX_LISTED = 8
"""Problems named one by one in an error; the rest are counted (a wrong checkpoint can have
hundreds)."""

HEADER_BYTES_PER_TENSOR = 256
"""Room in a safetensors header for one entry beyond its name (dtype, shape, offsets as JSON)."""
HEADER_SLACK = 4096
"""Room for the header's `__metadata__` and its padding to 8 bytes."""


@dataclass(frozen=True)
class WeightSpec:
    """What a pushed tensor must look like to replace one parameter or buffer."""

    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        """Bytes the tensor takes: what a push's body cap is summed from."""
        return torch.Size(self.shape).numel() * self.dtype.itemsize


def weight_specs(model: torch.nn.Module) -> dict[str, WeightSpec]:
    """Shape and dtype of every entry of `model.state_dict()`, by name."""
    return {
        name: WeightSpec(tuple(tensor.shape), tensor.dtype)
        for name, tensor in model.state_dict().items()
    }


def weight_problems(
    tensors: Mapping[str, torch.Tensor], specs: Mapping[str, WeightSpec], exact_dtype: bool
) -> list[str]:
    """Everything wrong with `tensors` as new values for `specs` (empty when all is well).

    `exact_dtype=False` lets a float tensor of another precision through (an in-process trainer
    in float32 beside a bfloat16 engine; the copy casts); a push over HTTP must match exactly,
    as the server's body cap is computed from the model's own dtypes.
    """
    problems = []
    for name, tensor in tensors.items():
        spec = specs.get(name)
        if spec is None:
            problems.append(f"{name!r} is not a weight of this model")
        elif tuple(tensor.shape) != spec.shape:
            problems.append(f"{name!r} has shape {list(tensor.shape)}, expected {list(spec.shape)}")
        elif tensor.dtype != spec.dtype and (
            exact_dtype or tensor.dtype.is_floating_point != spec.dtype.is_floating_point
        ):
            problems.append(f"{name!r} is {tensor.dtype}, expected {spec.dtype}")
        elif tensor.dtype.is_floating_point and not bool(torch.isfinite(tensor).all()):
            problems.append(f"{name!r} holds NaN or infinite values")
    return problems


def describe_problems(problems: list[str]) -> str:
    """One error message for `weight_problems`' findings, saying that nothing was applied."""
    listed = "; ".join(problems[:MAX_LISTED])
    more = f"; and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
    return (
        f"weight update refused, no weight changed ({len(problems)} problems): {listed}{more}. "
        "Send tensors named, shaped and typed as the served model's state_dict()"
    )


def push_size_limit(specs: Mapping[str, WeightSpec]) -> int:
    """The largest safetensors body a push of these weights can be: every tensor's bytes, plus
    the header (8 bytes of length, then one JSON entry per tensor)."""
    header = sum(len(name.encode()) + HEADER_BYTES_PER_TENSOR for name in specs)
    return 8 + HEADER_SLACK + header + sum(spec.nbytes for spec in specs.values())


def weights_payload(state_dict: Mapping[str, torch.Tensor]) -> bytes:
    """The state dict as safetensors bytes (contiguous CPU copies; shared storage split)."""
    from safetensors.torch import save

    return save({k: v.detach().to("cpu").contiguous().clone() for k, v in state_dict.items()})


def specs_json(specs: Mapping[str, WeightSpec]) -> dict[str, Any]:
    """`GET /beacon/weights`' answer: each weight's shape and dtype (as "bfloat16"), by name."""
    return {
        "weights": {
            name: {"shape": list(spec.shape), "dtype": str(spec.dtype).removeprefix("torch.")}
            for name, spec in specs.items()
        }
    }


def specs_from_json(body: Any) -> dict[str, WeightSpec]:
    """`specs_json`'s answer read back; ValueError for anything else."""
    try:
        specs = {}
        for name, entry in body["weights"].items():
            dtype = getattr(torch, entry["dtype"])
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"{entry['dtype']!r} is not a torch dtype")
            specs[name] = WeightSpec(tuple(int(n) for n in entry["shape"]), dtype)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ValueError(f"the server's weight list is malformed ({exc!r})") from None
    return specs


def cast_for(
    state_dict: Mapping[str, torch.Tensor], specs: Mapping[str, WeightSpec]
) -> dict[str, torch.Tensor]:
    """Each tensor in the dtype the server holds it in (float to float only); a name the server
    does not have goes as it is, for the server to refuse by name."""
    out = {}
    for name, tensor in state_dict.items():
        spec = specs.get(name)
        cast = spec is not None and tensor.is_floating_point() and spec.dtype.is_floating_point
        out[name] = tensor.detach().to(spec.dtype) if cast else tensor.detach()
    return out


def chunk_names(tensors: Mapping[str, torch.Tensor], chunk_bytes: int) -> list[list[str]]:
    """The names in order, cut into runs of at most `chunk_bytes` of tensor data each (a tensor
    larger than that is a run of its own); at least one run, so an empty push is still sent."""
    chunks: list[list[str]] = [[]]
    size = 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if chunks[-1] and size + nbytes > chunk_bytes:
            chunks.append([])
            size = 0
        chunks[-1].append(name)
        size += nbytes
    return chunks


def push_weights(
    base_urls: Sequence[str],
    state_dict: Mapping[str, torch.Tensor],
    timeout_s: float = 300.0,
    api_key: str | None = None,
    chunk_bytes: int = 512 << 20,
) -> None:
    """Push `state_dict` to every server (base URLs end in /v1, as the openai engine takes
    them): cast to the server's dtypes, in chunks of at most `chunk_bytes` of tensors (see the
    module docstring); not retried, since a server that misses a push must stop the run, not
    sample on."""
    for base_url in base_urls:
        root = base_url.rstrip("/").removesuffix("/v1")
        with HttpClient(root, api_key, timeout_s, concurrency=1) as client:
            try:
                failure = _push_one(client, root, state_dict, chunk_bytes)
            except Retryable as exc:
                failure = str(exc)
        if failure is not None:
            raise RuntimeError(
                f"weight push to {root}/beacon/update_weights failed ({failure}); the server "
                "would sample from a stale policy. Check rollout.servers, "
                "rollout.server_api_key_env, and that each one is `beacon serve` with the hf "
                "engine and --allow-weight-updates"
            )


def _push_one(
    client: Any, root: str, state_dict: Mapping[str, torch.Tensor], chunk_bytes: int
) -> str | None:
    """Why one server's push failed, or None when it took every chunk."""
    from safetensors.torch import save

    reply = client.get_blocking(f"{root}/beacon/weights")
    if reply.status != 200:
        return f"{reply.status} on GET /beacon/weights: {reply.error_message()[:300]}"
    try:
        tensors = cast_for(state_dict, specs_from_json(reply.json()))
    except ValueError as exc:
        return str(exc)
    chunks, push_id = chunk_names(tensors, chunk_bytes), uuid.uuid4().hex
    for index, names in enumerate(chunks):
        body = save({n: tensors[n].to("cpu").contiguous().clone() for n in names})
        url = f"{root}/beacon/update_weights?push={push_id}&chunk={index}&chunks={len(chunks)}"
        reply = client.post_blocking(url, body, "application/octet-stream")
        if reply.status != 200:
            return (
                f"chunk {index + 1} of {len(chunks)}: {reply.status}: {reply.error_message()[:300]}"
            )
    return None


@dataclass(frozen=True)
class ChunkId:
    """Which part of which push a body is: chunk `index` (from 0) of `total`."""

    push: str
    index: int
    total: int


@dataclass
class PushAssembler:
    """The chunks of the push in progress on a server, held until the last one arrived.

    `add` checks each chunk whole as it comes (`weight_problems` with exact dtypes, and no name
    sent twice in one push), so the staged tensors of a push are at most the model's size; any
    problem discards the whole push. Chunks come in order: chunk 0 starts a push (discarding an
    unfinished one: its trainer is gone or began again), chunk i > 0 must follow chunk i-1 of
    the same push and total. Not thread-safe: the server adds under one lock.
    """

    specs: Mapping[str, WeightSpec]
    push: ChunkId | None = None
    staged: dict[str, torch.Tensor] = field(default_factory=dict)

    def add(self, chunk: ChunkId, tensors: Mapping[str, torch.Tensor]) -> dict[str, Any] | None:
        """The whole push when `chunk` completes it, else None; ValueError (the push
        discarded, nothing applied) for a chunk out of order or with a problem."""
        if not 0 <= chunk.index < chunk.total:
            self.discard()
            raise ValueError(f"weight update refused: chunk={chunk.index} of chunks={chunk.total}")
        if chunk.index == 0:
            if self.push is not None:
                logger.warning("push %s left unfinished; discarded", self.push.push)
            self.discard()
        elif self.push != ChunkId(chunk.push, chunk.index - 1, chunk.total):
            expected = "a first chunk" if self.push is None else f"chunk {self.push.index + 1}"
            self.discard()
            raise ValueError(
                f"weight update refused, no weight changed: chunk {chunk.index} of push "
                f"{chunk.push!r} came where {expected} was expected (push refused, superseded or "
                "sent out of order); send the push again from chunk 0"
            )
        problems = weight_problems(tensors, self.specs, exact_dtype=True)
        problems += [
            f"{name!r} was already sent in this push" for name in tensors if name in self.staged
        ]
        if problems:
            self.discard()
            raise ValueError(describe_problems(problems))
        self.staged.update(tensors)
        self.push = chunk
        if chunk.index < chunk.total - 1:
            return None
        complete = self.staged
        self.discard()
        return complete

    def discard(self) -> None:
        """Forget the push in progress and its tensors."""
        self.push, self.staged = None, {}


def single_push() -> ChunkId:
    """The chunk id of a body sent without `?push=&chunk=&chunks=`: a whole push of its own."""
    return ChunkId(uuid.uuid4().hex, 0, 1)
