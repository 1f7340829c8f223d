"""Turn a worker's reply into an `ExecResult`, trusting nothing the child wrote.

The worker's header says how the child ended (exit status, timeout, overflow); its one blob is
the child's own result frame, which is parsed with `wire.decode_frame` and checked field by
field: text is truncated to the configured sizes and made valid UTF-8 (lone surrogates become
`\\udcXX` escapes), images must match their declared mode and size and stay under the pixel
limit. Nothing here raises: a result that fails a check becomes an error result.
"""

from __future__ import annotations

import signal
from typing import Any

from PIL import Image

from beacon.sandbox import wire
from beacon.sandbox.config import ExecResult, SandboxConfig

_MAX_ERROR_CHARS = 2000
_MAX_NOTES = 16
_HEADER_SLACK = 1 << 16


def max_result_bytes(cfg: SandboxConfig) -> int:
    """The most a child may send: its text, its images at full size, and framing."""
    text = 4 * (cfg.max_stdout_chars + _MAX_ERROR_CHARS * (_MAX_NOTES + 1)) + _HEADER_SLACK
    return 1 + text + cfg.max_images * cfg.max_image_pixels * 4


def worker_limits(cfg: SandboxConfig) -> wire.FrameLimits:
    return wire.FrameLimits(
        max_header_bytes=_HEADER_SLACK, max_blobs=1, max_total_bytes=max_result_bytes(cfg)
    )


def child_limits(cfg: SandboxConfig) -> wire.FrameLimits:
    return wire.FrameLimits(
        max_header_bytes=max_result_bytes(cfg) - cfg.max_images * cfg.max_image_pixels * 4,
        max_blobs=cfg.max_images,
        max_total_bytes=cfg.max_images * cfg.max_image_pixels * 4,
    )


def decode_result(frame: wire.Frame, cfg: SandboxConfig) -> ExecResult:
    """The ExecResult for one worker reply (header + the child's frame as its only blob)."""
    head = frame.header
    stopped = _stop_reason(head, cfg)
    notes = (
        ["carried variables were reset: loading them failed"] if head.get("state_dropped") else []
    )
    if stopped is not None:
        return ExecResult(ok=False, error=stopped, timed_out=head.get("timed_out") is True,
                          notes=notes)  # fmt: skip
    if not frame.blobs or not frame.blobs[0]:
        return ExecResult(
            ok=False,
            error=f"the code's process ended (exit status {head.get('exit_code')}) before "
            "reporting a result; the code may have called os._exit() or closed its output",
            notes=notes,
        )
    try:
        child = wire.decode_frame(frame.blobs[0], child_limits(cfg))
        return _child_result(child, cfg, notes)
    except Exception as exc:  # WireError, and anything a forged frame may still provoke
        reason = str(exc) if isinstance(exc, wire.WireError) else type(exc).__name__
        return ExecResult(ok=False, error=f"the code's process sent a malformed result: {reason}")


def timeout_text(cfg: SandboxConfig) -> str:
    return f"TimeoutError: the code ran longer than {cfg.timeout_s:g} s and was stopped"


def valid_text(text: str) -> str:
    """`text` as valid UTF-8: lone surrogates (which JSON can carry) become escapes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _stop_reason(head: dict[str, Any], cfg: SandboxConfig) -> str | None:
    """Why the child produced no usable result, or None if it did."""
    if head.get("timed_out") is True:
        return timeout_text(cfg)
    if head.get("overflow") is True:
        return "the code's result was larger than the sandbox limits allow and was discarded"
    if isinstance(head.get("error"), str):
        return valid_text(head["error"][:_MAX_ERROR_CHARS])
    if isinstance(head.get("setup_error"), str):
        setup = valid_text(head["setup_error"][-500:])
        return f"the sandbox could not prepare the process: {setup}"
    code = head.get("exit_code")
    if type(code) is not int:
        return "the sandbox worker sent no exit status"
    if code < 0:
        return _signal_text(-code, cfg)
    if code != 0:
        return f"the code's process exited with status {code} before reporting a result"
    return None


def _signal_text(number: int, cfg: SandboxConfig) -> str:
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    if name == "SIGXCPU":
        return f"the code used more than {cfg.cpu_limit_s:g} s of CPU time and was stopped"
    if name == "SIGKILL":
        return "the code's process was killed (SIGKILL), most likely for using too much memory"
    return f"the code crashed the interpreter ({name})"


def _child_result(child: wire.Frame, cfg: SandboxConfig, notes: list[str]) -> ExecResult:
    head = child.header
    stdout = head.get("stdout")
    error = head.get("error")
    if not isinstance(stdout, str) or not (error is None or isinstance(error, str)):
        raise wire.WireError("result needs a string 'stdout' and a string or null 'error'")
    total = head.get("stdout_chars")
    total = total if type(total) is int else len(stdout)
    stdout = stdout[: cfg.max_stdout_chars]
    if total > len(stdout):
        stdout += f"\n... [output truncated: {len(stdout)} of {total} characters shown]"
    child_notes = head.get("notes")
    if isinstance(child_notes, list):
        notes += [
            valid_text(n[:_MAX_ERROR_CHARS]) for n in child_notes[:_MAX_NOTES] if isinstance(n, str)
        ]
    metas = head.get("images")
    if not isinstance(metas, list) or len(metas) != len(child.blobs):
        raise wire.WireError("result must describe exactly one image per blob")
    images = []
    for meta, blob in zip(metas, child.blobs, strict=True):
        mode, width, height = wire.check_image_meta(meta, len(blob), cfg.max_image_pixels)
        images.append(Image.frombytes(mode, (width, height), blob))
    return ExecResult(
        ok=error is None,
        stdout=valid_text(stdout),
        error=None if error is None else valid_text(error[:_MAX_ERROR_CHARS]),
        images=images,
        notes=notes,
    )
