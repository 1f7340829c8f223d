"""The demo's SFT set: the scripted expert's verified trajectories, through real eval runs.

Two eval runs of the scripted expert (served over HTTP like any expert) make the data, so every
trajectory went through the agent loop, the sandbox and the verifier:

- `expert-tool/`: tool mode on the training items and on the hinted search items (the expert's
  tool-biased policy, `beacon.demo.expert`);
- `expert-text/`: notool mode on the easy training items: the share of correct text-only
  trajectories the paper mixes into its cold start;
- `expert-keys/`: tool mode on the `synth_keys` items (`KEYS_SETS`): `marked`, `told` with rare
  red keys, `keyed` with the hint and a few without it (two crops at most, `keys_agent`);
- `expert-told/`: tool mode on `synth_keys_told` items, half of them red: not SFT rows, the
  episodes the ReVuE teacher's `told` rows are made from (`beacon.demo.told_rows`).

Only correct, error-free episodes become training rows (`sft/trajectories.jsonl` + the images
they reference in `sft/images/`). Both runs resume after `kill -9` (they are eval runs).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from beacon.agent.config import AgentConfig
from beacon.benchmarks import get_benchmark
from beacon.benchmarks.synth_demo import (
    HINTED,
    SynthDemo,
    SynthDemoHinted,
    prerender,
    render_once,
)
from beacon.benchmarks.synth_keys import (
    KEYED_HINTED,
    SynthKeysKeyed,
    SynthKeysMarked,
    SynthKeysTold,
    SynthKeysToldRare,
)
from beacon.benchmarks.synth_keys import prerender as prerender_keys
from beacon.data.eval_stages import copy_images, run_trajectories
from beacon.data.records import write_training_set
from beacon.data.scripted_expert import create_scripted_app
from beacon.demo.config import DemoConfig
from beacon.demo.expert import MODEL_NAME, ScriptedDemoExpert, keys_agent
from beacon.engines.config import EngineConfig
from beacon.engines.serve import run_app_in_thread
from beacon.eval.config import EvalConfig
from beacon.eval.runner import run_eval
from beacon.images import ImageStore
from beacon.types import Sample

logger = logging.getLogger(__name__)

TRAIN_BENCH = SynthDemo.name
EXPERT_TOLD = "expert-told"
"""The expert's run on half-red `synth_keys_told` items: the teacher's `told` rows' source."""


def keys_sets(cfg: DemoConfig) -> dict[str, tuple[int, int]]:
    """`synth_keys` benchmark -> (first item, items) the expert solves for the SFT set
    (unhinted `keyed` items follow the hinted ones, so no item is seen both ways), and the
    teacher's `told` pool (`EXPERT_TOLD`, items after the SFT set's `told` ones)."""
    d = cfg.data
    return {
        SynthKeysMarked.name: (0, d.marked_items),
        SynthKeysToldRare.name: (0, d.told_items),
        KEYED_HINTED: (0, d.keyed_hinted_items),
        SynthKeysKeyed.name: (d.keyed_hinted_items, d.keyed_unhinted_items),
        SynthKeysTold.name: (d.told_items, cfg.revue.told_pool),
    }


def keys_items(cfg: DemoConfig, names: Sequence[str] | None = None) -> dict[str, list[Sample]]:
    """The items of `keys_sets` (or of its `names`), by benchmark, under the training seed."""
    seed = cfg.data.train_seed
    out = {}
    for name, (start, count) in keys_sets(cfg).items():
        if names is not None and name not in names:
            continue
        bench = get_benchmark(name)
        keys = bench.item_keys(start + count, seed)[start:]
        prerender_keys(keys, processes=cfg.threads)
        out[name] = list(bench.load(limit=start + count, seed=seed))[start:]
    return out


def expert_agent() -> AgentConfig:
    """One crop at most, short turns: all the demo's episodes need."""
    return AgentConfig(max_turns=2, max_tool_calls=1, max_new_tokens_per_turn=48)


def build_sft_data(cfg: DemoConfig, root: Path, progress: bool) -> dict[str, int]:
    """Run the expert, write `root/sft/`, return row counts by source and category."""
    with render_once():  # the items are indexed here, then loaded by both eval runs
        return _build_sft_data(cfg, root, progress)


def _build_sft_data(cfg: DemoConfig, root: Path, progress: bool) -> dict[str, int]:
    d = cfg.data
    train_bench, hinted_bench = SynthDemo(), SynthDemoHinted()
    hinted_seed = d.train_seed + 100
    prerender(
        [
            *train_bench.item_keys(d.train_items, d.train_seed),
            *hinted_bench.item_keys(d.hinted_items, hinted_seed),
        ],
        processes=cfg.threads,
    )
    train = list(train_bench.load(limit=d.train_items, seed=d.train_seed))
    hinted = list(hinted_bench.load(limit=d.hinted_items, seed=hinted_seed))
    easy_ids = [s.id for s in train if s.metadata["difficulty"] == "easy"][: d.text_items]
    keys = keys_items(cfg)
    every = [*train, *hinted, *(s for items in keys.values() for s in items)]
    expert = ScriptedDemoExpert(every, tool_bias=d.tool_bias, seed=d.train_seed)
    server = run_app_in_thread(create_scripted_app(expert, model_name=MODEL_NAME))
    try:
        engine = EngineConfig(
            name="openai", model=MODEL_NAME, base_url=server.base_url, concurrency=d.concurrency
        )
        common = {
            "engine": engine,
            "agent": expert_agent(),
            "concurrency": d.concurrency,
            "bootstrap": 0,
            "report": False,
        }
        tool_run = EvalConfig(
            benchmarks=[TRAIN_BENCH, HINTED],
            limit=max(d.train_items, d.hinted_items),
            ids={TRAIN_BENCH: [s.id for s in train], HINTED: [s.id for s in hinted]},
            modes=["tool"],
            seed=d.train_seed,
            out=str(root / "expert-tool"),
            **common,
        )
        text_run = EvalConfig(
            benchmarks=[TRAIN_BENCH],
            limit=d.train_items,
            ids={TRAIN_BENCH: easy_ids},
            modes=["notool"],
            seed=d.train_seed,
            out=str(root / "expert-text"),
            **common,
        )
        spans = keys_sets(cfg)
        told = {name: items for name, items in keys.items() if name == SynthKeysTold.name}
        sft_keys = {name: items for name, items in keys.items() if name not in told}
        keys_run, told_run = (
            EvalConfig(
                benchmarks=list(sets),
                limit=max((spans[name][0] + spans[name][1] for name in sets), default=1),
                ids={name: [s.id for s in items] for name, items in sets.items()},
                modes=["tool"],
                seed=d.train_seed,
                out=str(root / folder),
                **{**common, "agent": keys_agent()},
            )
            for sets, folder in ((sft_keys, "expert-keys"), (told, EXPERT_TOLD))
        )
        for run in (tool_run, text_run, keys_run, told_run):
            run_eval(run, progress=progress)
    finally:
        server.stop()
    return write_sft_set(root, [Path(run.out) for run in (tool_run, text_run, keys_run)])


def write_sft_set(root: Path, runs: list[Path]) -> dict[str, int]:
    """Correct, error-free episodes of `runs` -> `root/sft/`; counts by mode/tool/category."""
    folder = root / "sft"
    store = ImageStore(folder / "images")
    rows, counts = [], Counter[str]()
    for run in runs:
        source = ImageStore(run / "images")
        for done in run_trajectories(run):
            record = done.record
            if not record["correct"] or record.get("error"):
                counts["dropped"] += 1
                continue
            traj = done.trajectory
            copy_images(source, store, traj)
            traj.metadata = {
                **traj.metadata,
                "source": "scripted_expert",
                "eval_key": record["key"],
            }
            rows.append(traj.to_json())
            tool = "crop" if traj.used_tool else "direct"
            counts[f"{record['mode']}/{tool}/{record.get('category', '?')}"] += 1
    summary = write_training_set(folder, rows, counts)
    logger.info("demo SFT set: %d rows", len(rows))
    return summary
