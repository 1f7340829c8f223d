"""Engine test fixtures: tiny models built once per session into a temporary folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image

from beacon.engines.tiny import make_tiny_model

from .helpers import make_image


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """`tiny_dir(arch)`: a tiny model of `arch` (seed 0), built on first use in this session."""
    built: dict[str, Path] = {}

    def get(arch: str = "qwen2_vl") -> Path:
        if arch not in built:
            built[arch] = make_tiny_model(tmp_path_factory.mktemp(f"tiny-{arch}"), arch=arch)
        return built[arch]

    return get


@pytest.fixture(scope="session")
def hf_engine(tiny_dir: Callable[[str], Path]):
    """A shared hf engine on the tiny Qwen2-VL; tests must not change its logits_processors."""
    from beacon.engines.hf import HFEngine

    engine = HFEngine(tiny_dir("qwen2_vl"), batch_size=4)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def images() -> list[Image.Image]:
    return [make_image(300, 200, 1), make_image(64, 400, 2), make_image(120, 120, 3)]
