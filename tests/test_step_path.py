"""One GRPO step and one OPD step of the tiny configs walk through no more files and package
switches than `benchmarks/step_path.py`'s `CEILING` (issue 50: a step reads in a few rooms)."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.slow
def test_a_training_step_stays_in_few_rooms(
    tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import step_path

    paths = step_path.measure()
    for name, path in paths.items():
        rooms = {step_path.package(f) for f in path.files}
        assert not rooms & {"sandbox", "engines", "fakes"}, name  # left out, not descended into
        assert f"train/{name}" in rooms and "train/core" in rooms, name
        files, switches = len(path.files), len(path.switches())
        ceiling = step_path.CEILING[name]
        assert files <= ceiling[0] and switches <= ceiling[1], (name, files, switches)
        views = {
            "reader": (path.reader_view(), step_path.CEILING_READER),
            "step": (path.step_view(), step_path.CEILING_STEP),
            "step reader": (path.step_view().reader_view(), step_path.CEILING_STEP_READER),
        }
        for view, (walked, ceilings) in views.items():
            files, switches = len(walked.files), len(walked.switches())
            ceiling = ceilings[name]
            assert files <= ceiling[0] and switches <= ceiling[1], (name, view, files, switches)
        assert path.step_view().files < path.files  # the setup is not the step's
        reader = path.reader_view()  # issue 50's bound, met in the reader's view
        assert len(reader.files) <= step_path.TARGET[0], (name, sorted(reader.files))
        assert len(reader.switches()) <= step_path.TARGET[1], name
