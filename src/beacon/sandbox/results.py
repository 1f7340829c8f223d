"""Turn a worker's reply into an `ExecResult`, trusting nothing the child wrote.

The worker's header says how the child ended (exit status, timeout, overflow); its one blob is
the child's own result frame, which is parsed with `wire.decode_frame` and checked field by
field: text is truncated to the configured sizes and made valid UTF-8 (lone surrogates become
`\\udcXX` escapes), images must match their declared mode and size and stay under the pixel
limit, and an image left in a file (`wire.image_file`) is read only from a regular file of
exactly that size. Nothing here raises: a result that fails a check becomes an error result.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
from typing import Any

from PIL import Image

from beacon.sandbox import wire
from beacon.sandbox.config import ExecResult, SandboxConfig
from beacon.types import ImageCrop

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


def decode_result(frame: wire.Frame, cfg: SandboxConfig, folder: str, call: int) -> ExecResult:
    """The ExecResult for one worker reply (header + the child's frame as its only blob).

    `folder` and `call` locate the image files the child left (`wire.image_file`); they are
    all removed before this returns, read or not (a call stopped mid-way leaves some).
    """
    try:
        return _decode(frame, cfg, folder, call)
    finally:
        for index in range(cfg.max_images):
            with contextlib.suppress(OSError):
                os.unlink(wire.image_file(folder, call, index))


def _decode(frame: wire.Frame, cfg: SandboxConfig, folder: str, call: int) -> ExecResult:
    head = frame.header
    stopped = _stop_reason(head, cfg)
    notes: list[str] = []
    if head.get("carried_lost") is True:  # the worker saw the session's last save fail
        notes.append("variables from the previous call were not carried over")
    if head.get("state_dropped") is True:
        notes.append("carried variables were reset: loading them failed")
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
        return _child_result(child, cfg, notes, folder, call)
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


def _child_result(
    child: wire.Frame, cfg: SandboxConfig, notes: list[str], folder: str, call: int
) -> ExecResult:
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
    if not isinstance(metas, list) or len(metas) > cfg.max_images:
        raise wire.WireError(f"result must describe at most {cfg.max_images} images in a list")
    in_file = [isinstance(meta, dict) and meta.get("file") is True for meta in metas]
    if in_file.count(False) != len(child.blobs):
        raise wire.WireError("result must describe exactly one image per blob or file")
    images, blobs = [], iter(child.blobs)
    for index, meta in enumerate(metas):
        if in_file[index]:
            path = wire.image_file(folder, call, index)
            pixels = _read_image_file(path, meta, cfg.max_image_pixels)
        else:
            pixels = next(blobs)
        mode, width, height = wire.check_image_meta(meta, len(pixels), cfg.max_image_pixels)
        images.append(Image.frombytes(mode, (width, height), pixels))
    return ExecResult(
        ok=error is None,
        stdout=valid_text(stdout),
        error=None if error is None else valid_text(error[:_MAX_ERROR_CHARS]),
        images=images,
        notes=notes,
        image_crops=[_crop(meta.get("crop")) for meta in metas],
    )


def _crop(value: Any) -> ImageCrop | None:
    """The child's [frame, x0, y0, x1, y1] for one image, if it is five integers; else None
    (the code may have forged it, so it is a claim about the frame, never trusted further)."""
    if not isinstance(value, list) or len(value) != 5 or any(type(v) is not int for v in value):
        return None
    if value[0] < 0:
        return None
    return ImageCrop(value[0], tuple(value[1:]))


def _read_image_file(path: str, meta: dict[str, Any], max_pixels: int) -> bytearray:
    """The pixels a child left at `path`: a regular file of exactly the declared size.

    The folder is the session's own, so its code may have put anything at that name, or may
    change the file while it is read (its carried-variable save runs after the answer).
    Opening refuses a symlink (O_NOFOLLOW) and never waits (O_NONBLOCK: a FIFO without a
    writer, a file under a lease); anything but a regular file of the declared size, or a file
    truncated while read, fails the result. Never mapped: a truncation would be a SIGBUS here.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise wire.WireError(f"its image file cannot be opened ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise wire.WireError("its image file is not a regular file")
        wire.check_image_meta(meta, info.st_size, max_pixels)
        return wire.read_exact(fd, info.st_size)
    except EOFError:
        raise wire.WireError("its image file was truncated while it was read") from None
    finally:
        os.close(fd)
