"""Deferred sessions: paths at once, folder and inputs later (`Sandbox.session(deferred=True)`).

The agent loop opens every episode's session this way and stores its inputs while the model
writes its first turn, so these check what that relies on: the paths are the ones the opened
session shows, a call opens the session itself, a failed open fails the calls (not the
caller), and a session closed before it opened leaves nothing behind.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from beacon.images import ImageError
from beacon.sandbox import Sandbox, SandboxError

from .helpers import assert_benign_call_works, make_image


def test_paths_are_known_before_anything_is_stored(sandbox: Sandbox) -> None:
    eager = sandbox.session(images=[make_image()])
    deferred = sandbox.session(images=[make_image()], deferred=True)
    try:
        assert deferred.image_paths == eager.image_paths  # under bwrap the same text
        assert deferred.image_sizes == eager.image_sizes == [(64, 48)]
        assert not os.path.exists(deferred.dir)
        deferred.open()
        assert Path(deferred.host_image_paths[0]).read_bytes() == (
            Path(eager.host_image_paths[0]).read_bytes()
        )
        assert_benign_call_works(deferred)
    finally:
        eager.close()
        deferred.close()


def test_the_first_call_opens_a_deferred_session(sandbox: Sandbox) -> None:
    with sandbox.session(images=[make_image()], deferred=True) as s:
        assert_benign_call_works(s)
        s.open()  # a second open (the loop's, arriving late) changes nothing
        r = s.run("print(open(image_path, 'rb').read(2))")
        assert r.ok and r.stdout == "b'BM'\n", r.error


def test_a_failed_open_fails_every_call_not_the_caller(sandbox: Sandbox, tmp_path: Path) -> None:
    path = tmp_path / "in.png"
    make_image().save(path)
    s = sandbox.session(images=[path], deferred=True)  # the header is read now
    path.unlink()  # ... and the file is gone when the session stores it
    with pytest.raises(ImageError, match="cannot read input image"):
        s.open()
    for _ in range(2):
        with pytest.raises(SandboxError, match="could not be opened: ImageError"):
            s.run("print(1)")
    s.close()
    sandbox.wait_for_cleanup()
    assert not os.path.exists(s.dir)


def test_refused_inputs_are_refused_at_once(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    from .test_sandbox import _png_header_bomb

    with pytest.raises(ImageError, match="decompression bomb"):
        sandbox.session(images=[_png_header_bomb(30000, 30000)], deferred=True)
    small = sandbox.config.model_copy(update={"max_input_pixels": 1000})
    monkeypatch.setattr(sandbox, "config", small)
    with pytest.raises(ImageError, match="decompression bomb"):
        sandbox.session(images=[make_image()], deferred=True)


def test_closed_before_it_opened_leaves_nothing_and_never_opens(sandbox: Sandbox) -> None:
    s = sandbox.session(images=[make_image()], deferred=True)
    s.close()
    s.open()  # the loop's open, queued behind the episode's end: nothing happens
    sandbox.wait_for_cleanup()
    assert not os.path.exists(s.dir)
    with pytest.raises(SandboxError, match="closed"):
        s.run("pass")


def test_close_waits_for_an_open_under_way(sandbox: Sandbox) -> None:
    big = make_image().resize((3000, 2000))  # long enough to open that close arrives meanwhile
    for _ in range(5):
        s = sandbox.session(images=[big], deferred=True)
        opener = threading.Thread(target=s.open)
        opener.start()
        s.close()
        opener.join()
        sandbox.wait_for_cleanup()
        assert not os.path.exists(s.dir)
