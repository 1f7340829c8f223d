"""Shared pieces of the sandbox tests: tight limits, the test image, the benign check call."""

from __future__ import annotations

import numpy as np
from PIL import Image

from beacon.sandbox import SandboxConfig, Session

BENIGN = "print(image.size)\nimage.crop((0, 0, 10, 10)).show()"


def tight_config(**overrides: object) -> SandboxConfig:
    """Limits small enough that memory bombs and spins end in about a second."""
    base: dict[str, object] = dict(
        num_workers=2,
        timeout_s=1.5,
        memory_mb=512,
        max_file_mb=8,
        max_state_mb=8,
        max_stdout_chars=2000,
        max_image_pixels=2048 * 2048,
        max_images=4,
    )
    return SandboxConfig(**{**base, **overrides})


def make_image() -> Image.Image:
    """64x48 with a distinct colour per pixel, so a wrong crop or a mixed-up image shows."""
    y, x = np.mgrid[0:48, 0:64]
    return Image.fromarray(np.stack([x * 4, y * 5, (x + y) % 256], axis=-1).astype(np.uint8))


def assert_benign_call_works(session: Session) -> None:
    """The call every attack is followed by: it must give exactly the right answer."""
    result = session.run(BENIGN)
    assert result.ok, result.error
    assert result.stdout == "(64, 48)\n"
    assert len(result.images) == 1
    expected = np.asarray(make_image().crop((0, 0, 10, 10)))
    np.testing.assert_array_equal(np.asarray(result.images[0]), expected)
