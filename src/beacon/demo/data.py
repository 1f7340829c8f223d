"""The demo's SFT set: the scripted expert's verified trajectories, through real eval runs.

Two eval runs of the scripted expert (served over HTTP like any expert) make the data, so every
trajectory went through the agent loop, the sandbox and the verifier:

- `expert-tool/`: tool mode on the training items and on the hinted search items (the expert's
  tool-biased policy, `beacon.demo.expert`);
- `expert-text/`: notool mode on the easy training items: the share of correct text-only
  trajectories the paper mixes into its cold start;
- `expert-keys/`: tool mode on the `synth_keys` items (`keys_sets`): `marked`, `keyed` with the
  hint and a few without it (two crops at most, `keys_agent`);
- `expert-told/`: tool mode on `synth_keys_told` items, half of them red: the first
  `data.told_items` become SFT rows, the rest (`revue.told_pool`) are the episodes the ReVuE
  teacher's `told` rows are made from (`beacon.demo.told_rows`).

Only correct, error-free episodes become training rows (`sft/trajectories.jsonl` + the images
they reference in `sft/images/`), with one constructed exception: a red-key `told` row is the
expert's episode with the key noted red and mapped as a grey one (`told_rows.wrong_path`), so
the cold start, and every model made from it, writes the colour and gets the red rule wrong.
That is demo II's constructed weakness (docs/demo.md): only the critic's reflection, which knows
the rule, can correct it. The runs resume after `kill -9` (they are eval runs).
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
)
from beacon.benchmarks.synth_keys import prerender as prerender_keys
from beacon.data.eval_stages import copy_images, run_trajectories
from beacon.data.records import write_training_set
from beacon.data.scripted_expert import create_scripted_app
from beacon.demo.config import DemoConfig
from beacon.demo.expert import MODEL_NAME, ScriptedDemoExpert, keys_agent
from beacon.demo.told_rows import expert_episodes, wrong_path
from beacon.engines.config import EngineConfig
from beacon.engines.serve import run_app_in_thread
from beacon.eval.config import EvalConfig
from beacon.eval.runner import run_eval
from beacon.images import ImageStore
from beacon.types import Sample, Trajectory

logger = logging.getLogger(__name__)

TRAIN_BENCH = SynthDemo.name
EXPERT_TOLD = "expert-told"
"""The expert's run on half-red `synth_keys_told` items: the teacher's `told` rows' source."""


def keys_sets(cfg: DemoConfig) -> dict[str, tuple[int, int]]:
    """`synth_keys` benchmark -> (first item, items) the expert solves: the SFT set's (unhinted
    `keyed` items follow the hinted ones, so no item is seen both ways) and, for `told`, the SFT
    set's `data.told_items` followed by the teacher's pool (`told_pool`)."""
    d = cfg.data
    return {
        SynthKeysMarked.name: (0, d.marked_items),
        KEYED_HINTED: (0, d.keyed_hinted_items),
        SynthKeysKeyed.name: (d.keyed_hinted_items, d.keyed_unhinted_items),
        SynthKeysTold.name: (0, d.told_items + cfg.revue.told_pool),
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


def told_pool(cfg: DemoConfig) -> list[Sample]:
    """The teacher's `told` items: those of `expert-told` after the SFT set's."""
    return keys_items(cfg, [SynthKeysTold.name])[SynthKeysTold.name][cfg.data.told_items :]


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
    expert = ScriptedDemoExpert(
        every, tool_bias=d.tool_bias, seed=d.train_seed, hint_followed=d.hint_followed
    )
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
    runs = [Path(run.out) for run in (tool_run, text_run, keys_run)]
    sft_told = keys[SynthKeysTold.name][: d.told_items]
    return write_sft_set(root, runs, Path(told_run.out), sft_told)


def write_sft_set(
    root: Path, runs: list[Path], told_run: Path, told: list[Sample]
) -> dict[str, int]:
    """Correct, error-free episodes of `runs` and the `told` rows of `told_run`'s `told` items
    -> `root/sft/`; counts by mode/tool/category."""
    folder = root / "sft"
    store = ImageStore(folder / "images")
    told_sft = sft_told_rows(told_run, told, store)
    rows, counts = [t.to_json() for t in told_sft], Counter[str]()
    counts["tool/crop/told"] = len(told_sft)
    counts["tool/crop/told-red-as-grey"] = sum(t.metadata["told_red_as_grey"] for t in told_sft)
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


def sft_told_rows(run: Path, told: list[Sample], store: ImageStore) -> list[Trajectory]:
    """The expert's correct `told` episodes of `told` in `run`, a red key's noted red and mapped
    as a grey one (module docstring): the SFT set's `told` rows."""
    rows = []
    for colour, episodes in expert_episodes([run], told, store).items():
        for sample, trajectory in episodes:
            red = colour == "red"
            row = wrong_path(sample, trajectory, store, context=False) if red else trajectory
            row.metadata = {**row.metadata, "source": "scripted_expert", "told_red_as_grey": red}
            rows.append(row)
    return rows
