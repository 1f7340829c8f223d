"""`beacon eval` over hub-format local copies of real benchmarks, not only `synth`: loaders,
prompts, scoring, benchmark aggregates (HR-Bench's circular accuracy) and missing images."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from beacon.agent.config import AgentConfig
from beacon.eval.config import EvalConfig
from beacon.eval.runner import run_eval
from beacon.report.eval_runs import report_eval_run

_spec = importlib.util.spec_from_file_location(
    "local_copies", Path(__file__).parents[1] / "benchmarks" / "local_copies.py"
)
local_copies = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(local_copies)


def test_eval_on_local_hub_format_files(tmp_path: Path, tiny_model_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    hrbench = local_copies.build_hrbench(data) / "hr_bench_4k.tsv"
    cfg = EvalConfig(
        agent=AgentConfig(max_new_tokens_per_turn=8, max_total_new_tokens=16),
        benchmarks=["hrbench_4k", "mathvista"],
        data={
            "hrbench_4k": str(hrbench),
            "mathvista": str(Path(__file__).parents[1] / "benchmarks/data/mathvista"),
        },
        limit=4,
        out=str(tmp_path / "run"),
        bootstrap=50,
    )
    summary = run_eval(cfg, progress=False)
    report_eval_run(cfg, summary)  # what `beacon eval` writes at the end
    records = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").open()]
    assert {r["benchmark"] for r in records} == {"hrbench_4k", "mathvista"}
    assert len(records) == 2 * 4 * 2  # 2 benchmarks x 4 items x 2 modes
    hr_records = [r for r in records if r["benchmark"] == "hrbench_4k"]
    assert all(r["error"] is None for r in hr_records)
    # The real MathVista rows name image files that are not shipped: each such sample is a
    # recorded input error, scored wrong, and the run goes on.
    for record in (r for r in records if r["benchmark"] == "mathvista"):
        assert record["finish_reason"] == "input_error" and "image" in record["error"]
        assert record["correct"] is False
    hr = summary["benchmarks"]["hrbench_4k"]
    assert set(hr["aggregates"]["tool"]) >= {"accuracy", "circular_accuracy"}
    assert (tmp_path / "run" / "report.md").read_text().count("## Benchmark:") == 2
