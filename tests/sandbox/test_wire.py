"""The wire format rejects malformed and oversized frames before allocating for them."""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import threading
import time
from pathlib import Path

import pytest

from beacon.sandbox import wire
from beacon.sandbox.config import ExecResult, SandboxConfig
from beacon.sandbox.results import decode_result

LIMITS = wire.FrameLimits(max_header_bytes=1024, max_blobs=2, max_total_bytes=100)


def raw_frame(header: bytes, *blobs: bytes, length: int | None = None) -> bytes:
    size = len(header) if length is None else length
    return struct.pack("<I", size) + header + b"".join(blobs)


def test_round_trip() -> None:
    data = wire.encode_frame({"a": 1, "text": "héllo"}, [b"xyz", b""])
    frame = wire.decode_frame(data, LIMITS)
    assert frame.header == {"a": 1, "text": "héllo", "blobs": [3, 0]}
    assert frame.blobs == [b"xyz", b""]


def test_write_parts_writes_everything_in_order_through_partial_writes() -> None:
    """Parts larger than the pipe's buffer: `writev` returns early, mid-part and between."""
    parts = [b"a" * 70_000, b"", memoryview(bytearray(b"b" * 100_001))[1:], b"c", b"d" * 65_536]
    read, write = os.pipe()
    got = bytearray()
    reader = threading.Thread(target=lambda: got.extend(wire.read_exact(read, 235_537)))
    reader.start()
    wire.write_parts(write, parts)
    reader.join()
    os.close(read)
    os.close(write)
    assert got == b"".join(parts)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x01\x00", "shorter than its length prefix"),
        (raw_frame(b"{}", length=5000), "over the limit"),
        (raw_frame(b'{"blobs": []}', length=40), "ends inside its header"),
        (raw_frame(b"not json"), "not valid JSON"),
        (raw_frame(b"\xff\xfe"), "not valid JSON"),
        (raw_frame(b"[1, 2]"), "must be a JSON object"),
        (raw_frame(b'{"blobs": NaN}'), "not valid JSON"),
        (raw_frame(b'{"x": 1}'), "'blobs' must be a list"),
        (raw_frame(b'{"blobs": [-1]}'), "'blobs' must be a list"),
        (raw_frame(b'{"blobs": [true]}'), "'blobs' must be a list"),
        (raw_frame(b'{"blobs": ["3"]}'), "'blobs' must be a list"),
        (raw_frame(b'{"blobs": [1, 1, 1]}', b"abc"), "3 blobs, over the limit of 2"),
        (raw_frame(b'{"blobs": [101]}', b"x" * 101), "over the limit of 100"),
        (raw_frame(b'{"blobs": [4]}', b"abc"), "announces 4 blob bytes but carries 3"),
        (raw_frame(b'{"blobs": [2]}', b"abc"), "announces 2 blob bytes but carries 3"),
    ],
)
def test_malformed_frames_are_rejected(data: bytes, message: str) -> None:
    with pytest.raises(wire.WireError, match=message):
        wire.decode_frame(data, LIMITS)


def test_stream_reader_checks_the_header_size_before_reading_it() -> None:
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, struct.pack("<I", 1 << 30))
        with pytest.raises(wire.WireError, match="over the limit"):
            wire.read_frame(read_fd, LIMITS, deadline=time.monotonic() + 5)
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_stream_reader_times_out_on_a_silent_peer() -> None:
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, struct.pack("<I", 10) + b"{")
        with pytest.raises(TimeoutError):
            wire.read_frame(read_fd, LIMITS, deadline=time.monotonic() + 0.05)
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_stream_reader_reports_eof_mid_frame() -> None:
    read_fd, write_fd = os.pipe()
    os.write(write_fd, wire.encode_frame({"k": 1}, [b"abcdef"])[:-2])
    os.close(write_fd)
    try:
        with pytest.raises(EOFError):
            wire.read_frame(read_fd, LIMITS, deadline=time.monotonic() + 5)
    finally:
        os.close(read_fd)


def test_stream_reader_grows_its_buffer_for_blobs_over_the_preallocation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(wire, "_PREALLOCATE_BYTES", 4)
    read_fd, write_fd = os.pipe()
    try:
        for part in wire.frame_parts({"k": 1}, [b"0123456789abc", b""]):
            os.write(write_fd, part)
        frame = wire.read_frame(read_fd, LIMITS, deadline=time.monotonic() + 5)
    finally:
        os.close(read_fd)
        os.close(write_fd)
    assert frame.header == {"k": 1, "blobs": [13, 0]}
    assert [bytes(b) for b in frame.blobs] == [b"0123456789abc", b""]


def test_write_frame_matches_encode_frame() -> None:
    read_fd, write_fd = os.pipe()
    try:
        wire.write_frame(write_fd, {"a": [1, 2]}, [b"xy", memoryview(b"abcdef")[2:]])
        written = os.read(read_fd, 1 << 16)
    finally:
        os.close(read_fd)
        os.close(write_fd)
    assert written == wire.encode_frame({"a": [1, 2]}, [b"xy", b"cdef"])


@pytest.mark.parametrize(
    ("meta", "size", "message"),
    [
        ({"mode": "RGB", "width": 2, "height": 2}, 12, None),
        ({"mode": "CMYK", "width": 2, "height": 2}, 16, "mode"),
        ({"mode": "RGB", "width": 0, "height": 2}, 0, "positive"),
        ({"mode": "RGB", "width": 2.0, "height": 2}, 12, "positive"),
        ({"mode": "RGB", "width": True, "height": 2}, 6, "positive"),
        ({"mode": "RGB", "width": 2, "height": 2}, 11, "needs 12 bytes"),
        ({"mode": "L", "width": 100, "height": 100}, 10000, "over the limit"),
        ("RGB", 12, "must be an object"),
    ],
)
def test_image_descriptions_are_checked(meta: object, size: int, message: str | None) -> None:
    if message is None:
        assert wire.check_image_meta(meta, size, max_pixels=64) == ("RGB", 2, 2)
    else:
        with pytest.raises(wire.WireError, match=message):
            wire.check_image_meta(meta, size, max_pixels=64)


# --- whole worker replies, as results.decode_result sees them

CFG = SandboxConfig(max_stdout_chars=10, max_images=2, max_image_pixels=16, isolation="none")


def decode(frame: wire.Frame, folder: Path = Path("/nonexistent-beacon-folder")) -> ExecResult:
    return decode_result(frame, CFG, str(folder), call=1)


def reply(child_header: dict, blobs: list[bytes] = (), **worker: object) -> wire.Frame:
    child = wire.encode_frame(child_header, list(blobs))
    head = {"op": "result", "exit_code": 0, "timed_out": False, "overflow": False, **worker}
    return wire.Frame(head, [child])


def good_child(**fields: object) -> dict:
    return {"stdout": "hi", "error": None, "notes": [], "images": [], **fields}


def test_a_valid_reply_becomes_a_result_with_images() -> None:
    meta = {"mode": "L", "width": 2, "height": 2}
    result = decode(reply(good_child(images=[meta]), [b"\x00\x01\x02\x03"]))
    assert result.ok and result.stdout == "hi"
    assert result.images[0].size == (2, 2) and list(result.images[0].tobytes()) == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("child", "blobs"),
    [
        (good_child(stdout=5), []),
        (good_child(error=["x"]), []),
        (good_child(images=[{"mode": "L", "width": 2, "height": 2}]), []),
        (good_child(images=[]), [b"1234"]),
        (good_child(images=[{"mode": "L", "width": 5, "height": 5}]), [b"x" * 25]),
        (good_child(images=[{"mode": "L", "width": 2, "height": 2}] * 3), [b"xxxx"] * 3),
    ],
)
def test_lying_children_get_a_malformed_result_error(child: dict, blobs: list[bytes]) -> None:
    result = decode(reply(child, blobs))
    assert not result.ok
    assert result.images == []
    assert "malformed result" in result.error


def test_images_in_files_are_read_once_and_removed(tmp_path: Path) -> None:
    Path(wire.image_file(str(tmp_path), 1, 0)).write_bytes(b"\x00\x01\x02\x03")
    metas = [
        {"mode": "L", "width": 2, "height": 2, "file": True},
        {"mode": "L", "width": 1, "height": 1},
    ]
    result = decode(reply(good_child(images=metas), [b"\x09"]), tmp_path)
    assert result.ok, result.error
    assert [img.tobytes() for img in result.images] == [b"\x00\x01\x02\x03", b"\x09"]
    assert list(tmp_path.iterdir()) == []


def _plant(kind: str, path: Path, elsewhere: Path) -> None:
    if kind == "symlink":
        elsewhere.write_bytes(b"SECRET")  # the size the description asks for
        path.symlink_to(elsewhere)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "short":
        path.write_bytes(b"xyz")
    elif kind == "long":
        path.write_bytes(b"x" * 9)


@pytest.mark.parametrize("kind", ["missing", "symlink", "fifo", "folder", "short", "long"])
def test_whatever_the_code_put_at_an_image_files_name_is_a_malformed_result(
    tmp_path: Path, kind: str
) -> None:
    """The session's own code may replace its image file (its save runs after the answer):
    the trusted side follows no symlink, never blocks on a FIFO, reads only a regular file of
    the declared size, and removes the name whatever it is."""
    folder, elsewhere = tmp_path / "session", tmp_path / "host-file"
    folder.mkdir()
    _plant(kind, Path(wire.image_file(str(folder), 1, 0)), elsewhere)
    meta = {"mode": "RGB", "width": 2, "height": 1, "file": True}
    result = decode(reply(good_child(images=[meta])), folder)
    assert not result.ok and "malformed result" in result.error and result.images == []
    assert [p.name for p in folder.iterdir()] == ([".beacon-image-1-0"] if kind == "folder" else [])
    if kind == "symlink":
        assert elsewhere.read_bytes() == b"SECRET"


def test_image_files_of_a_stopped_call_are_removed(tmp_path: Path) -> None:
    for index in range(CFG.max_images):
        Path(wire.image_file(str(tmp_path), 1, index)).write_bytes(b"left")
    Path(wire.image_file(str(tmp_path), 2, 0)).write_bytes(b"next call")
    assert decode(reply(good_child(), timed_out=True), tmp_path).timed_out
    assert [p.name for p in tmp_path.iterdir()] == [".beacon-image-2-0"]


def test_oversized_text_from_the_child_is_cut_to_the_limits() -> None:
    child = good_child(stdout="x" * 500, stdout_chars=500, error="E" * 10_000)
    result = decode(reply(child))
    assert result.stdout == "x" * 10 + "\n... [output truncated: 10 of 500 characters shown]"
    assert len(result.error) == 2000


def test_a_child_frame_larger_than_the_limits_is_rejected() -> None:
    huge = json.dumps({"stdout": "x" * 2_000_000}).encode()
    frame = wire.Frame({"op": "result", "exit_code": 0}, [struct.pack("<I", len(huge)) + huge])
    assert "malformed result" in decode(frame).error


@pytest.mark.parametrize(
    ("worker", "message"),
    [
        ({"timed_out": True}, "TimeoutError"),
        ({"overflow": True}, "larger than the sandbox limits"),
        ({"exit_code": -11}, "SIGSEGV"),
        ({"exit_code": -24}, "CPU time"),
        ({"exit_code": -9}, "SIGKILL"),
        ({"exit_code": 3}, "status 3"),
        ({"exit_code": "0"}, "no exit status"),
    ],
)
def test_worker_status_explains_a_stopped_call(worker: dict, message: str) -> None:
    result = decode(reply(good_child(), **worker))
    assert not result.ok
    assert message in result.error


def test_a_deeply_nested_forged_header_is_a_malformed_result_not_a_crash() -> None:
    """Before: 60 000 nested '[' made json.loads raise RecursionError out of Session.run()."""
    head = b"[" * 60_000 + b"]" * 60_000
    frame = wire.Frame({"op": "result", "exit_code": 0}, [struct.pack("<I", len(head)) + head])
    result = decode(frame)
    assert not result.ok and "nested too deeply" in result.error


@pytest.mark.parametrize(
    "child",
    [
        good_child(stdout="caf\udce9"),
        good_child(error="Bad: \ud800"),
        good_child(notes=["x\udfff"]),
        good_child(stdout="ok", error=None, notes=[5, None, "fine"]),
    ],
)
def test_results_hold_valid_utf8_only(child: dict) -> None:
    """Before: lone surrogates came back in stdout/error and broke the eval's JSONL writer."""
    result = decode(reply(child))
    texts = [result.stdout, result.error or "", *result.notes]
    json.dumps(texts, ensure_ascii=False).encode("utf-8")
    assert all("\\ud" in t or "\\udc" in t or t.isascii() for t in texts)


def test_run_request_round_trips_and_refuses_other_fields() -> None:
    fields = {f.name: 1 for f in dataclasses.fields(wire.RunRequest)}
    request = wire.RunRequest(**fields)
    header = json.loads(wire.encode_frame(request.to_header())[4:])
    assert wire.RunRequest.from_header(header) == request
    for body in ({**fields, "extra": 1}, {k: v for k, v in fields.items() if k != "code"}, []):
        with pytest.raises(ValueError, match="exactly the fields"):
            wire.RunRequest.from_header({"op": "run", "request": body})
