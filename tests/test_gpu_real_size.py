"""benchmarks/gpu_real_size.py builds the published Qwen2.5-VL shapes: checked here on the meta
device (no weights), so the GPU run finds its configs valid with the installed transformers."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.parametrize(
    ("shape", "total"),
    [("3B", 3_754_622_976), ("7B", 8_292_166_656)],  # the checkpoints' published totals
)
def test_real_size_models_have_the_published_parameter_count(
    shape: str, total: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With an empty cache: the tiny model the config borrows its token ids from is built
    on the way, outside the meta device (inside it, saving the model raised)."""
    monkeypatch.setenv("BEACON_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import gpu_real_size

    counts = gpu_real_size.param_counts(shape)
    assert counts["total"] == total
    assert 0 < counts["vision"] < counts["n_lm"] < counts["total"]
    text = gpu_real_size.model_config(shape).text_config
    assert text.rope_parameters["mrope_section"] == [16, 24, 24]
