"""Weight pushes into a serving model: the payload, the client that sends it, and the checks
before any tensor is copied.

A push is the trainer's state dict as safetensors bytes (`weights_payload`: contiguous CPU
copies, so tied weights travel as two entries), POSTed as `application/octet-stream` to
`beacon serve`'s `/beacon/update_weights` (servers started with `--allow-weight-updates`) by
`push_weights`; a server that refuses is an error naming it, since a stale server would sample
from an old policy. It replaces the policy every later request samples from, so a bad one must
change nothing: `weight_problems` looks at the whole push first — every name a parameter of the
model, every shape equal (`copy_` would broadcast a 1-element tensor over a whole matrix),
optionally every dtype equal, every value finite — and the engine copies only when it found none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

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


def push_weights(
    base_urls: Sequence[str], payload: bytes, timeout_s: float = 300.0, api_key: str | None = None
) -> None:
    """POST `payload` to every server (base URLs end in /v1, as the openai engine takes them);
    not retried, since a server that misses a push must stop the run, not sample on."""
    for base_url in base_urls:
        url = base_url.rstrip("/").removesuffix("/v1") + "/beacon/update_weights"
        failure = _push_one(url, payload, timeout_s, api_key)
        if failure is not None:
            raise RuntimeError(
                f"weight push to {url} failed ({failure}); the server would sample from a stale "
                "policy. Check rollout.servers, rollout.server_api_key_env, and that each one is "
                "`beacon serve` with the hf engine and --allow-weight-updates"
            )


def _push_one(url: str, payload: bytes, timeout_s: float, api_key: str | None) -> str | None:
    """Why one push failed, or None when the server took it."""
    from beacon.engines.http import HttpClient, Retryable

    with HttpClient(url, api_key, timeout_s, concurrency=1) as client:
        try:
            reply = client.post_blocking(url, payload, "application/octet-stream")
        except Retryable as exc:
            return str(exc)
    return None if reply.status == 200 else f"{reply.status}: {reply.error_message()[:300]}"
