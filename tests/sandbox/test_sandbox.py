"""Sandbox behaviour: Thyme conventions, carried variables, limits, worker replacement."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import struct
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from beacon.config import ConfigError, load_config
from beacon.eval.config import EvalConfig
from beacon.images import ImageError
from beacon.sandbox import Sandbox, SandboxConfig, SandboxError, jail

from .helpers import assert_benign_call_works, make_image, tight_config


def processes_of_uid(uid: int) -> list[int]:
    """Host pids whose real uid is `uid` (a session's code runs as its own uid)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
        if int(uid_line.split()[1]) == uid:
            pids.append(int(entry.name))
    return pids


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_bwrap_is_the_default_isolation(sandbox: Sandbox) -> None:
    assert sandbox.isolation == "bwrap"


def test_thyme_namespace(sandbox: Sandbox) -> None:
    with sandbox.session(images=[make_image()]) as s:
        r = s.run(
            "print(image.size, image.mode, Image.open(image_path).size)\n"
            "print(cv2.__name__, np.__name__, plt.__name__, ImageDraw.__name__, math.pi > 3)\n"
            "print(os.getcwd() == os.path.realpath(output_dir))"
        )
    assert r.ok, r.error
    assert r.stdout == (
        "(64, 48) RGB (64, 48)\ncv2 numpy matplotlib.pyplot PIL.ImageDraw True\nTrue\n"
    )


@pytest.mark.parametrize(
    ("code", "size"),
    [
        ("image.crop((0, 0, 20, 10)).show()", (20, 10)),
        ("plt.figure(figsize=(2, 1), dpi=50)\nplt.plot([1, 2])\nplt.show()", (100, 50)),
        ("image.resize((8, 6)).save('a.png')\nprint('saved to', os.path.abspath('a.png'))", (8, 6)),
        (
            "processed_path = os.path.join(output_dir, 'p.jpg')\nimage.save(processed_path)",
            (64, 48),
        ),
        (
            "p = '/mnt/data/temp_processed_images/t.png'\nimage.crop((0, 0, 5, 5)).save(p)\n"
            "print(p)",
            (5, 5),
        ),
        ("cv2.imwrite('c.png', np.zeros((7, 9, 3), np.uint8))\nprint('c.png')", (9, 7)),
    ],
    ids=["image-show", "plt-show", "printed-path", "processed-path", "thyme-dir", "cv2-relative"],
)
def test_images_come_back_by_every_thyme_convention(
    sandbox: Sandbox, code: str, size: tuple[int, int]
) -> None:
    with sandbox.session(images=[make_image()]) as s:
        r = s.run(code)
    assert r.ok, r.error
    assert [img.size for img in r.images] == [size]


RETURNED = (
    "pixels = np.random.default_rng(5).integers(0, 256, (23, 37, 4), dtype=np.uint8)\n"
    "for mode in ('RGB', 'RGBA', 'L', 'P'):\n"
    "    Image.fromarray(pixels).convert(mode).show()\n"
)
SQUATTED = (
    "for call in range(1, 4):\n    for i in range(4):\n"
    "        os.mkdir(os.path.join(output_dir, f'.beacon-image-{call}-{i}'))\n"
)


@pytest.mark.parametrize("squatted", [False, True], ids=["in-files", "names-taken"])
def test_returned_images_arrive_pixel_for_pixel_and_leave_no_files(
    sandbox: Sandbox, squatted: bool
) -> None:
    """Images come back through files in the session's folder, read once and removed; where
    the code took their names, through the result frame instead, with the same pixels."""
    pixels = np.random.default_rng(5).integers(0, 256, (23, 37, 4), dtype=np.uint8)
    source = Image.fromarray(pixels)
    expected = [source.convert(mode) for mode in ("RGB", "RGBA", "L")]
    expected.append(source.convert("P").convert("RGB"))  # the child converts P to RGB
    with sandbox.session(images=[make_image()]) as s:
        r = s.run((SQUATTED if squatted else "") + RETURNED)
        assert r.ok, r.error
        assert [(img.mode, img.tobytes()) for img in r.images] == [
            (img.mode, img.tobytes()) for img in expected
        ]
        left = sorted(p.name for p in Path(s.host_output_dir).iterdir())
    assert left == (
        sorted(f".beacon-image-{c}-{i}" for c in range(1, 4) for i in range(4)) if squatted else []
    )


def test_printing_the_input_path_does_not_return_the_input(sandbox: Sandbox) -> None:
    with sandbox.session(images=[make_image()]) as s:
        r = s.run("print(image_path)")
    assert r.ok and r.images == []


def test_variables_carry_over_between_calls(sandbox: Sandbox) -> None:
    with sandbox.session(images=[make_image()]) as s:
        assert s.run("x = 41\ncrop = image.crop((0, 0, 4, 4))\ndef f():\n    return 1").ok
        assert s.run("y = 'unrelated'").ok  # does not load x or crop, must keep them
        r = s.run("print(x + 1, crop.size)\nprint('f' in globals())")
    assert r.ok, r.error
    assert r.stdout == "42 (4, 4)\nFalse\n"  # functions do not carry over


def test_carried_images_come_back_pixel_for_pixel_past_a_failed_pickle(sandbox: Sandbox) -> None:
    """Images are pickled by their raw memory straight into the state file; a value that fails
    halfway through its pickle is cut out of the file, and the variables after it still carry."""
    first = (
        "rgb = image.crop((0, 0, 10, 10))\nl = rgb.convert('L')\nrgba = rgb.convert('RGBA')\n"
        "bad = [rgb, lambda: 3]\nafter = 'kept'"
    )
    with sandbox.session(images=[make_image()]) as s:
        assert s.run(first).ok
        assert s.run("rgb.putpixel((0, 0), (1, 2, 3))").ok  # loaded, changed, saved again
        r = s.run("rgb.show()\nl.show()\nrgba.show()\nprint(after, 'bad' in globals())")
    assert r.ok, r.error
    assert r.stdout == "kept False\n"
    crop = make_image().crop((0, 0, 10, 10))
    changed = crop.copy()
    changed.putpixel((0, 0), (1, 2, 3))
    expected = [changed, crop.convert("L"), crop.convert("RGBA")]
    assert [i.mode for i in r.images] == ["RGB", "L", "RGBA"]
    for got, want in zip(r.images, expected, strict=True):
        assert np.array_equal(np.asarray(got), np.asarray(want))


SLOW_SAVE = (
    "import time\nclass Slow:\n    def __reduce__(self):\n        time.sleep(0.4)\n"
    "        return (int, (7,))\n"
)


def test_a_call_sees_variables_whose_save_was_still_running(sandbox: Sandbox) -> None:
    with sandbox.session(images=[make_image()]) as s:
        assert s.run(SLOW_SAVE + "x = Slow()").ok  # answered before x is saved
        assert s.run("y = 1").ok  # runs during that save, must not lose x or overtake it
        r = s.run("print(x, y)")
    assert r.ok, r.error
    assert r.stdout == "7 1\n"


def test_a_save_that_never_ends_is_killed_and_reported() -> None:
    spin = "class Spin:\n    def __reduce__(self):\n        while True:\n            pass\n"
    with Sandbox(tight_config(num_workers=1)) as sb, sb.session(images=[make_image()]) as s:
        assert s.run("a = 1").ok
        assert s.run(spin + "b = Spin()").ok  # its save is killed at the call's deadline
        r = s.run("print(a)\nprint('b' in globals())")
        assert r.ok, r.error
        assert not r.timed_out  # waiting for the killed save does not use up this call's time
        assert r.stdout == "1\nFalse\n"
        assert "variables from the previous call were not carried over" in r.notes
        assert_benign_call_works(s)


def test_carry_variables_off() -> None:
    config = tight_config(num_workers=1, carry_variables=False)
    with Sandbox(config) as sb, sb.session(images=[make_image()]) as s:
        assert s.run("x = 1").ok
        r = s.run("print(x)")
    assert not r.ok and r.error.startswith("NameError")


def test_how_the_codes_process_ended_is_reported(sandbox: Sandbox) -> None:
    """The template reaps every child and tells the worker how it ended."""
    with sandbox.session(images=[make_image()]) as s:
        exited = s.run("os._exit(3)")
        crashed = s.run("import ctypes\nctypes.string_at(0)")
        assert_benign_call_works(s)
    assert exited.error == "the code's process exited with status 3 before reporting a result"
    assert crashed.error == "the code crashed the interpreter (SIGSEGV)"


def test_errors_name_the_exception_and_the_line(sandbox: Sandbox) -> None:
    with sandbox.session(images=[make_image()]) as s:
        r = s.run("a = 1\nb = undefined_name + a")
        syntax = s.run("x = (1,\n")
    assert r.error == "NameError: name 'undefined_name' is not defined (line 2)"
    assert not syntax.ok and syntax.error.startswith("SyntaxError")


def test_stdout_is_kept_up_to_the_limit(sandbox: Sandbox) -> None:
    with sandbox.session(images=[make_image()]) as s:
        r = s.run("print('a' * 5000)")
    assert r.ok
    assert r.stdout.startswith("a" * 2000 + "\n... [output truncated: 2000 of 5001")


def test_code_repair_runs_before_execution(sandbox: Sandbox) -> None:
    with sandbox.session(images=[make_image()]) as s:
        r = s.run("```python\n    c = image.crop((40, 30, 500, 400))\n    c.show()\n```")
    assert r.ok, r.error
    assert r.repairs
    assert r.code == "c = image.crop((40, 30, 500, 400))\nc.show()\n"  # what actually ran
    assert r.images[0].size == (24, 18)  # the box was clamped at run time to the 64x48 image
    assert r.notes == [
        "crop box (40, 30, 500, 400) was outside the 64x48 image or too small; it was clamped "
        "to (40, 30, 64, 48)"
    ]


def test_call_limit_per_session() -> None:
    config = tight_config(num_workers=1, max_calls_per_session=2)
    with Sandbox(config) as sb, sb.session(images=[make_image()]) as s:
        assert s.run("pass").ok and s.run("pass").ok
        r = s.run("pass")
    assert not r.ok and "max_calls_per_session=2" in r.error


def test_inputs_as_pil_path_and_bytes(sandbox: Sandbox, tmp_path: Path) -> None:
    path = tmp_path / "in.jpg"
    make_image().save(path, quality=95)
    for source in (make_image(), path, str(path), path.read_bytes()):
        with sandbox.session(images=[source]) as s:
            r = s.run("print(image.size, image_path.rsplit('.', 1)[-1])")
            assert r.ok, r.error
            assert r.stdout.split()[:2] == ["(64,", "48)"]


def _png_header_bomb(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    head = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IEND", b"")


def test_decompression_bomb_inputs_are_refused(sandbox: Sandbox) -> None:
    with pytest.raises(ImageError, match="decompression bomb"):
        sandbox.session(images=[_png_header_bomb(30000, 30000)])


def test_closing_a_session_deletes_its_folder(sandbox: Sandbox) -> None:
    s = sandbox.session(images=[make_image()])
    assert s.run("open('f.txt', 'w').write('x')").ok
    folder = Path(s.dir)
    assert (Path(s.host_output_dir) / "f.txt").exists()
    s.close()
    sandbox.wait_for_cleanup()
    assert not folder.exists()
    with pytest.raises(SandboxError, match="closed"):
        s.run("pass")


@pytest.mark.skipif(os.geteuid() != 0, reason="per-session uids need root")
@pytest.mark.parametrize(
    "code",
    [
        "while True:\n    pass",
        "import threading\nfor _ in range(20):\n"
        "    threading.Thread(target=time.sleep, args=(60,)).start()\nwhile True:\n    pass",
    ],
    ids=["spin", "threads"],
)
def test_no_process_of_the_session_survives_a_timeout(sandbox: Sandbox, code: str) -> None:
    with sandbox.session(images=[make_image()]) as s:
        r = s.run(code)
        assert r.timed_out
        assert processes_of_uid(s.uid) == []
        assert_benign_call_works(s)


def test_a_killed_worker_is_replaced() -> None:
    with Sandbox(tight_config(num_workers=1)) as sb, sb.session(images=[make_image()]) as s:
        assert s.run("x = 5").ok
        old = sb.worker_pids()
        os.kill(old[0], signal.SIGKILL)
        r = s.run("print(x)")
        assert r.ok and r.stdout == "5\n"  # the state lives on disk, not in the worker
        assert sb.worker_pids() != old
        assert_benign_call_works(s)


def test_a_growing_worker_is_replaced_after_the_call() -> None:
    config = tight_config(num_workers=1, worker_max_rss_mb=1)
    with Sandbox(config) as sb, sb.session(images=[make_image()]) as s:
        first = sb.worker_pids()
        assert s.run("x = 7").ok
        assert sb.worker_pids() == [-1]  # replaced lazily, before the next call
        r = s.run("print(x)")
    assert r.ok and r.stdout == "7\n"
    assert first != [-1]


@pytest.mark.parametrize("isolation", ["unshare", "none"])
def test_fallback_isolation_layers_run_code(isolation: str) -> None:
    if shutil.which(isolation) is None and isolation != "none":
        pytest.skip(f"{isolation} is not installed")
    if isolation == "unshare" and not jail.readable_by_others(jail.python_dirs()):
        with pytest.raises(SandboxError, match="not readable by other users"):
            Sandbox(tight_config(num_workers=1, isolation=isolation))
        return
    with Sandbox(tight_config(num_workers=1, isolation=isolation)) as sb:
        assert sb.isolation == isolation
        with sb.session(images=[make_image()]) as s:
            assert_benign_call_works(s)
            assert not s.run("import socket\nsocket.socket()").ok


def test_config_validate_lists_every_problem() -> None:
    assert SandboxConfig().validate() == []
    with pytest.raises(ValueError) as info:
        SandboxConfig(timeout_s=-1.0, num_workers=0, cpu_s=0)
    assert str(info.value.errors()[0]["ctx"]["error"]).splitlines() == [
        "timeout_s: must be > 0, got -1.0",
        "num_workers: must be > 0, got 0",
        "cpu_s: must be > 0 or None, got 0.0",
    ]
    with pytest.raises(ValueError, match="isolation"):
        SandboxConfig(isolation="docker")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_state_mb: must be <= max_file_mb=64"):
        SandboxConfig(max_state_mb=128, max_file_mb=64)


def test_sandbox_refuses_an_invalid_config_before_starting_workers() -> None:
    config = SandboxConfig().model_copy(update={"timeout_s": 0, "memory_mb": -5})
    with pytest.raises(ValueError, match="2 problems") as info:
        Sandbox(config)
    assert "timeout_s: must be > 0, got 0" in str(info.value)
    assert "memory_mb: must be > 0, got -5" in str(info.value)


def test_load_config_reports_sandbox_problems_with_the_others() -> None:
    overrides = ["sandbox.timeout_s=-1", "sandbox.max_images=0", "samples=0"]
    with pytest.raises(ConfigError, match="3 problems") as info:
        load_config(EvalConfig, overrides=overrides)
    assert "sandbox: timeout_s: must be > 0, got -1.0" in info.value.problems
    assert "sandbox: max_images: must be > 0, got 0" in info.value.problems


def test_async_sessions_run_concurrently(sandbox: Sandbox) -> None:
    async def one(value: int) -> str:
        img = Image.fromarray(np.full((8, 8, 3), value, np.uint8))
        with sandbox.session(images=[img]) as s:
            r = await s.arun("print(image.getpixel((0, 0))[0])")
        return r.stdout.strip()

    async def main() -> list[str]:
        return await asyncio.gather(*(one(v) for v in range(10, 16)))

    assert asyncio.run(main()) == [str(v) for v in range(10, 16)]


def test_auto_isolation_refuses_when_no_layer_works(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jail, "_probe", lambda layer: f"{layer} cannot start here")
    with pytest.raises(SandboxError, match="isolation='none'") as info:
        jail.resolve_isolation("auto")
    assert "bwrap: bwrap cannot start here" in str(info.value)
    assert "unshare: unshare cannot start here" in str(info.value)
    assert jail.resolve_isolation("none") == "none"


def test_repair_can_be_turned_off() -> None:
    with Sandbox(tight_config(num_workers=1, repair=None)) as sb, sb.session() as s:
        r = s.run("    print(1)")
    assert not r.ok and r.error.startswith("IndentationError") and r.repairs == []


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_every_session_sees_the_same_thyme_paths() -> None:
    """Prompts show image paths, so they must not differ between rollouts of one sample."""
    with Sandbox(tight_config(num_workers=1, repair=None)) as sb:
        first, second = sb.session(images=[make_image()]), sb.session(images=[make_image()])
        assert first.image_paths == second.image_paths == ["/mnt/data/images/image_0.bmp"]
        assert first.output_dir == second.output_dir == "/mnt/data/temp_processed_images"
        r = first.run(
            "print(Image.open(image_path).size)\n"
            "p = '/mnt/data/temp_processed_images/c.png'\n"
            "image.crop((0, 0, 6, 6)).save(p)\nprint(p)"
        )
        assert r.ok, r.error
        assert r.stdout.startswith("(64, 48)") and [i.size for i in r.images] == [(6, 6)]
        assert (Path(first.host_output_dir) / "c.png").exists()
        assert not (Path(second.host_output_dir) / "c.png").exists()
        first.close()
        second.close()


def test_drawing_on_the_input_image_does_not_change_it_for_later_calls(sandbox: Sandbox) -> None:
    big = Image.fromarray(np.full((1500, 2000, 3), 50, np.uint8))  # several huge pages
    with sandbox.session(images=[big]) as s:
        r = s.run(
            "image.paste((255, 0, 0), (0, 0, 2000, 1500))\nprint(image.getpixel((1999, 1499)))"
        )
        assert r.ok and r.stdout == "(255, 0, 0)\n", r.error
        r = s.run("print(image.getpixel((0, 0)), image.getpixel((1999, 1499)))")
    assert r.ok and r.stdout == "(50, 50, 50) (50, 50, 50)\n", r.error


def test_input_images_do_not_live_in_the_worker() -> None:
    """Each call maps its own session's pixels; the worker's memory does not grow with them."""
    big = Image.fromarray(np.zeros((3000, 4000, 3), np.uint8))  # 48 MB decoded, each
    with Sandbox(tight_config(num_workers=1, worker_max_rss_mb=200)) as sb:
        sessions = [sb.session(images=[big]) for _ in range(3)]
        pids = sb.worker_pids()
        for s in sessions:
            assert s.run("print(image.size)").stdout == "(4000, 3000)\n"
        assert sb.worker_pids() == pids  # not replaced: under 200 MB with 144 MB of inputs
        for s in sessions:
            s.close()


def test_oversized_carried_state_is_not_kept(sandbox: Sandbox) -> None:
    with sandbox.session(images=[make_image()]) as s:
        assert s.run("small = 1\nbig = bytearray(9 << 20)").ok  # over max_state_mb=8
        r = s.run("print(small)")
    assert not r.ok and r.error.startswith("NameError")


def test_code_repair_counts_against_the_call_deadline(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Repair runs before the call, inside its timeout_s: a slow one leaves the code no time."""
    from beacon.sandbox import sandbox as sandbox_module
    from beacon.sandbox.repair import RepairResult

    def slow_repair(code: str, **kwargs: object) -> RepairResult:
        time.sleep(sandbox.config.timeout_s)
        return RepairResult(code)

    monkeypatch.setattr(sandbox_module, "repair_code", slow_repair)
    with sandbox.session(images=[make_image()]) as s:
        r = s.run("print('ran')")
    assert r.timed_out and not r.ok and r.stdout == ""
    assert r.code == "print('ran')"


def test_code_over_the_size_limit_is_refused_before_repair(sandbox: Sandbox) -> None:
    with sandbox.session(images=[make_image()]) as s:
        r = s.run("cv.a;" * 20_001)
    assert not r.ok and "max_code_chars" in r.error and r.repairs == []
