"""beacon.config: loading pydantic models from YAML + --set, error text, round trips, identity."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Literal

import pytest
from pydantic import Field, model_validator

from beacon import configs
from beacon.config import (
    ConfigError,
    StrictModel,
    config_class_for,
    describe,
    format_describe,
    identity,
    identity_diff,
    identity_hash,
    load_config,
    parse_overrides,
    raise_problems,
    to_dict,
    to_yaml,
)


class NaarConfig(StrictModel):
    code_reward: float = Field(0.5, description="reward for a correct answer that used code")
    penalty: float = Field(0.0, description="subtracted per unused tool call")


class RLConfig(StrictModel):
    naar: NaarConfig = Field(default_factory=lambda: NaarConfig(code_reward=0.25))
    lr: float = Field(1e-6, description="learning rate of the policy")


class RolloutConfig(StrictModel):
    group_size: int = Field(8, description="samples per prompt")
    temperatures: list[float] = Field(default_factory=lambda: [1.0])

    @model_validator(mode="after")
    def _check(self) -> RolloutConfig:
        if self.group_size < 2:
            raise_problems([f"group_size={self.group_size} gives every group zero advantage"])
        return self


class EngineConfig(StrictModel):
    name: Literal["hf", "vllm", "openai"] = Field("hf", description="generation backend")
    model: str | None = Field(None, description="model folder or hub id")
    stop: list[str] = Field(default_factory=list, description="extra stop strings")


class TrainConfig(StrictModel):
    run_name: str = Field(description="folder name under runs/")
    rl: RLConfig = Field(default_factory=RLConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    modes: list[Literal["tool", "notool", "hinted"]] = Field(default_factory=lambda: ["tool"])
    output_dir: Path = Field(Path("runs"), description="where run folders go")
    bf16: bool = Field(True, description="train in bfloat16")
    weights: dict[str, float] = Field(default_factory=lambda: {"acc": 1.0, "format": 0.1})
    boxes: list[list[int]] = Field(default_factory=list)
    max_turns: int | str = 4
    image_size: tuple[int, int] = (64, 48)
    scales: tuple[float, ...] = ()
    seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        problems = []
        if "hinted" in self.modes and self.rollout.group_size < 4:
            problems.append("modes include hinted, which needs rollout.group_size >= 4")
        if self.seed < 0:
            problems.append(f"seed: must be >= 0, got {self.seed}")
        raise_problems(problems)
        return self


def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def load(*overrides: str, path: Path | None = None) -> TrainConfig:
    return load_config(TrainConfig, path=path, overrides=["run_name=r", *overrides])


def problems_of(*overrides: str, path: Path | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(*overrides, path=path)
    return info.value.problems


def test_defaults_and_nested_default_from_parent_factory():
    cfg = load()
    assert cfg == TrainConfig(run_name="r")
    assert cfg.rl.naar.code_reward == 0.25


def test_exact_error_text(tmp_path):
    path = write(
        tmp_path, "run_name: r\nrl:\n  naar:\n    code_rewrd: 1\nrollout:\n  group_size: eight\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(TrainConfig, path=str(path))
    assert str(info.value) == (
        f"config error in {path} (2 problems):\n"
        "  rl.naar.code_rewrd: unknown key; did you mean rl.naar.code_reward?\n"
        '  rollout.group_size: expected int, got "eight"'
    )


def test_single_problem_header_names_file_and_set(tmp_path):
    path = write(tmp_path, "run_name: r\n")
    with pytest.raises(ConfigError) as info:
        load_config(TrainConfig, path=path, overrides=["seed=x"])
    assert str(info.value).splitlines()[0] == f"config error in {path} + --set (1 problem):"


def test_config_error_pickles_with_its_problems():
    error = pickle.loads(pickle.dumps(ConfigError(["a: bad", "b: worse"], "x.yaml")))
    assert (error.problems, error.source) == (["a: bad", "b: worse"], "x.yaml")


def test_unknown_key_without_close_match_lists_valid_keys():
    assert problems_of("engine.zzz=1") == ["engine.zzz: unknown key; valid keys: name, model, stop"]


def test_missing_required_setting():
    with pytest.raises(ConfigError) as info:
        load_config(TrainConfig)
    assert info.value.problems == [
        "run_name: missing required setting (str); set it in the file or with --set run_name=..."
    ]
    assert "TrainConfig defaults" in str(info.value)


def test_literal_rejection_lists_allowed_values():
    assert problems_of("engine.name=vlm") == [
        'engine.name: expected one of "hf", "vllm", "openai", got "vlm"'
    ]


def test_flow_list_override_and_literal_items():
    assert load("modes=[tool,notool]").modes == ["tool", "notool"]
    assert problems_of("modes=[tool,toll]") == [
        'modes[1]: expected one of "tool", "notool", "hinted", got "toll"'
    ]


def test_nested_list_override():
    assert load("boxes=[[1,2],[3,4]]").boxes == [[1, 2], [3, 4]]
    assert load("engine.stop=[</code>, </answer>]").engine.stop == ["</code>", "</answer>"]
    assert problems_of("boxes=[[1,x]]") == ['boxes[0][1]: expected int, got "x"']


def test_exponent_float_without_dot_is_a_float(tmp_path):
    assert load("rl.lr=1e-5").rl.lr == 1e-5
    path = write(tmp_path, "run_name: r\nrl:\n  lr: 3E+2\n  naar:\n    penalty: .5e-1\n")
    cfg = load_config(TrainConfig, path=path)
    assert (cfg.rl.lr, cfg.rl.naar.penalty) == (300.0, 0.05)


def test_float_accepts_int_but_int_rejects_float_and_bool(tmp_path):
    cfg = load("rl.naar.code_reward=1")
    assert cfg.rl.naar.code_reward == 1.0 and isinstance(cfg.rl.naar.code_reward, float)
    assert problems_of("rollout.group_size=8.5") == ["rollout.group_size: expected int, got 8.5"]
    path = write(tmp_path, "run_name: r\nseed: true\n")
    assert problems_of(path=path) == ["seed: expected int, got true"]


def test_bool_words_only_from_set(tmp_path):
    assert [load(f"bf16={word}").bf16 for word in ("no", "False", "yes", "true")] == [
        False,
        False,
        True,
        True,
    ]
    assert problems_of("bf16=maybe") == ['bf16: expected bool, got "maybe"']
    assert problems_of(path=write(tmp_path, "run_name: r\nbf16: 1\n")) == [
        "bf16: expected bool, got 1"
    ]


def test_set_text_is_verbatim_for_str_fields():
    assert load("run_name=2024").run_name == "2024"
    assert load("engine.model=1e-5").engine.model == "1e-5"
    assert load("engine.model=null").engine.model is None
    assert load("engine.model=Qwen/Qwen2.5-VL-3B").engine.model == "Qwen/Qwen2.5-VL-3B"


def test_union_tries_each_arm():
    assert load("max_turns=5").max_turns == 5
    assert load("max_turns=many").max_turns == "many"
    assert problems_of("max_turns=[1]") == ["max_turns: expected int | str, got [1]"]


def test_tuples():
    cfg = load("image_size=[10, 20]", "scales=[1, 0.5, 2]")
    assert (cfg.image_size, cfg.scales) == ((10, 20), (1.0, 0.5, 2.0))
    assert problems_of("image_size=[1, 2, 3]", "scales=3") == [
        "image_size: expected tuple[int, int], got [1, 2, 3]",
        "scales: expected tuple[float, ...], got 3",
    ]
    assert problems_of("image_size=[1, a]") == ['image_size[1]: expected int, got "a"']


def test_path_fields_become_paths():
    assert load("output_dir=/tmp/x").output_dir == Path("/tmp/x")


def test_set_one_dict_key_keeps_the_others_but_a_file_dict_replaces(tmp_path):
    assert load("weights.tool=0.5").weights == {"acc": 1.0, "format": 0.1, "tool": 0.5}
    path = write(tmp_path, "run_name: r\nweights: {tool: 2}\n")
    assert load_config(TrainConfig, path=path).weights == {"tool": 2.0}
    assert problems_of("weights.acc=high") == ['weights.acc: expected float, got "high"']


def test_file_section_is_laid_over_the_field_default(tmp_path):
    path = write(tmp_path, "run_name: r\nrl:\n  naar:\n    penalty: 0.1\n")
    cfg = load_config(TrainConfig, path=path, overrides=["rl.naar.penalty=0.2"])
    assert cfg.rl.naar == NaarConfig(code_reward=0.25, penalty=0.2)


def test_empty_section_keeps_defaults(tmp_path):
    path = write(tmp_path, "run_name: r\nengine:\n  # name: vllm\nrollout:\n")
    assert load_config(TrainConfig, path=path) == TrainConfig(run_name="r")


def test_set_into_a_scalar_is_reported():
    assert problems_of("seed.x=1") == [
        "--set seed.x: seed is 0, not a section of settings; set it whole, e.g. --set seed=..."
    ]


def test_validator_problems_come_after_type_problems_with_path_prefix():
    assert problems_of("rollout.group_size=1", "modes=[hinted]") == [
        "rollout: group_size=1 gives every group zero advantage",
    ]
    assert problems_of("rollout.group_size=3", "modes=[hinted]", "seed=-1") == [
        "modes include hinted, which needs rollout.group_size >= 4",
        "seed: must be >= 0, got -1",
    ]
    # bf16 is wrong, so TrainConfig's own validator cannot run; the rollout section was built,
    # so its check still shows, after the type problem.
    assert problems_of("rollout.group_size=1", "modes=[hinted]", "bf16=maybe") == [
        'bf16: expected bool, got "maybe"',
        "rollout: group_size=1 gives every group zero advantage",
    ]


def test_malformed_overrides():
    with pytest.raises(ConfigError) as info:
        parse_overrides(["seed", "=3", "a.b=[1,"])
    problems = info.value.problems
    assert len(problems) == 3
    assert problems[0] == "--set seed: expected key=value with a dotted key, e.g. engine.name=hf"
    assert problems[2].startswith("--set a.b=[1,: value is not valid YAML")
    parsed = parse_overrides(["a.b = [x, 2]"])
    assert (parsed[0].keys, parsed[0].value) == (("a", "b"), ["x", 2])


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("- 1\n- 2\n", "top level: expected a mapping of TrainConfig settings, got [1, 2]"),
        ("a: [1\n", "not valid YAML"),
    ],
)
def test_bad_files(tmp_path, text, problem):
    with pytest.raises(ConfigError) as info:
        load_config(TrainConfig, path=write(tmp_path, text))
    assert info.value.problems[0].startswith(problem)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(TrainConfig, path=tmp_path / "nope.yaml")
    assert info.value.problems == ["file not found"]


def test_to_yaml_round_trips(tmp_path):
    cfg = load(
        "run_name=1e-5",
        "engine.model=yes",
        "rl.lr=2e-7",
        "modes=[tool,notool]",
        "boxes=[[0,1]]",
        "weights.x=3",
        "max_turns=many",
        "output_dir=/tmp/o",
        "scales=[0.5]",
    )
    text = to_yaml(cfg)
    assert "run_name: '1e-5'" in text
    path = write(tmp_path, text)
    assert load_config(TrainConfig, path=path) == cfg
    assert to_dict(cfg)["output_dir"] == "/tmp/o"


def test_describe_reads_field_descriptions():
    rows = {row.name: (row.type, row.default, row.help) for row in describe(TrainConfig)}
    assert rows["rl.naar.code_reward"] == (
        "float",
        "0.25",
        "reward for a correct answer that used code",
    )
    assert rows["rl.lr"] == ("float", "1e-06", "learning rate of the policy")
    assert rows["output_dir"] == ("path", '"runs"', "where run folders go")
    assert rows["run_name"] == ("str", "(required)", "folder name under runs/")
    assert rows["engine.name"] == ('"hf" | "vllm" | "openai"', '"hf"', "generation backend")
    assert rows["engine.model"] == ("str | null", "null", "model folder or hub id")
    assert rows["weights"][0:2] == ("dict[str, float]", '{"acc": 1.0, "format": 0.1}')
    assert rows["seed"] == ("int", "0", "")
    assert "rl.naar" not in rows
    table = format_describe(TrainConfig)
    assert table.splitlines()[0].split() == ["setting", "type", "default", "help"]
    assert len(table.splitlines()) == len(rows) + 1


def test_describe_with_a_config_shows_its_values():
    cfg = load_config(TrainConfig, overrides=["run_name=r1", "rl.lr=0.5"])
    rows = {row.name: row.default for row in describe(TrainConfig, cfg)}
    assert rows["run_name"] == '"r1"' and rows["rl.lr"] == "0.5"
    assert rows["rl.naar.code_reward"] == "0.25"  # untouched settings keep their defaults
    header = format_describe(TrainConfig, cfg).splitlines()[0].split()
    assert header == ["setting", "type", "value", "help"]


def test_config_class_for_reads_first_line(tmp_path):
    named = write(tmp_path, f"# config: {__name__}:TrainConfig\nrun_name: r\n", "a.yaml")
    assert config_class_for(named) is TrainConfig
    assert config_class_for(write(tmp_path, "run_name: r\n", "b.yaml")) is None
    wrong = write(tmp_path, f"# config: {__name__}:write\n", "c.yaml")
    with pytest.raises(ConfigError, match="not a pydantic model"):
        config_class_for(wrong)


SHIPPED = [  # accelerate's own --config_file format: tests/test_configs.py checks those
    path for path in sorted(configs.root().rglob("*.y*ml")) if path.parent.name != "accelerate"
]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(configs.root())))
def test_shipped_config_loads(path, tmp_path):
    """Every shipped Beacon config names its model on line 1 and loads without problems."""
    cls = config_class_for(path)
    assert cls is not None, f"{path} must start with '# config: module:Class'"
    config = load_config(cls, path=path)
    assert load_config(cls, path=write(tmp_path, to_yaml(config))) == config


class Job(StrictModel):
    engine: EngineConfig = Field(default_factory=EngineConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    out: str = "runs/x"
    workers: int = 4


def test_identity_drops_operational_keys_and_sections():
    flat = identity(Job(), ["out", "workers", "engine"])
    assert flat == {"rollout.group_size": 8, "rollout.temperatures": [1.0]}
    moved = Job(out="elsewhere", workers=1, engine=EngineConfig(name="vllm"))
    assert identity_hash(identity(moved, ["out", "workers", "engine"])) == identity_hash(flat)
    other = identity(Job(rollout=RolloutConfig(group_size=4)), ["out", "workers", "engine"])
    assert identity_hash(other) != identity_hash(flat)


def test_identity_diff_names_changed_added_and_removed_keys():
    before = {"a": 1, "b": "x", "gone": True}
    now = {"a": 2, "b": "x", "new": None}
    assert identity_diff(before, now) == [
        "a: 1 -> 2",
        'gone: true -> "(unset)"',
        'new: "(unset)" -> null',
    ]


def test_load_config_refuses_a_non_model():
    with pytest.raises(TypeError, match="pydantic model"):
        load_config(dict)  # type: ignore[type-var]


def alias_bomb(levels: int, width: int = 10) -> list[str]:
    """YAML items `&l0 [lol x width]`, then `&lk [*l(k-1) x width]`: `width**levels` values."""
    items = ["&l0 [" + ", ".join(["lol"] * width) + "]"]
    items += [f"&l{k} [" + ", ".join([f"*l{k - 1}"] * width) + "]" for k in range(1, levels)]
    return items


def test_an_alias_bomb_is_refused_before_anything_expands_it(tmp_path):
    """1 KB of nested aliases stands for 10^6 values here (10^9 a few lines on): refused when the
    file is read, before validation or the error printer walk the tree."""
    text = "".join(f"b{k}: {item}\n" for k, item in enumerate(alias_bomb(6))) + "seed: *l5\n"
    assert len(text) < 1024
    with pytest.raises(ConfigError) as info:
        load_config(TrainConfig, path=write(tmp_path, text))
    (problem,) = info.value.problems
    assert problem.startswith("not valid YAML: its aliases expand to more than 100000 values")
    with pytest.raises(ConfigError, match="alias bomb"):
        parse_overrides(["scales=[" + ", ".join(alias_bomb(6)) + "]"])


def test_a_few_aliases_and_no_recursive_one(tmp_path):
    text = "boxes: [&b [1, 2], *b]\n"
    assert load(path=write(tmp_path, text)).boxes == [[1, 2], [1, 2]]
    with pytest.raises(ConfigError, match="refers to the node that holds it"):
        load(path=write(tmp_path, "boxes: &b [*b]\n"))


def _settings_sections() -> set[type]:
    """Every pydantic model reachable from the top-level configs of Beacon's commands."""
    from pydantic import BaseModel

    from beacon.data.config import DataConfig
    from beacon.demo.config import DemoConfig
    from beacon.eval.config import EvalConfig
    from beacon.train.grpo.config import GRPOConfig
    from beacon.train.opd.config import OPDConfig
    from beacon.train.rft.config import RFTConfig
    from beacon.train.sft.config import SFTConfig

    found: set[type] = set()
    todo: list[type] = [DataConfig, DemoConfig, EvalConfig, GRPOConfig, OPDConfig, RFTConfig]
    todo.append(SFTConfig)
    while todo:
        model = todo.pop()
        if model in found:
            continue
        found.add(model)
        for field in model.model_fields.values():
            for arg in [field.annotation, *getattr(field.annotation, "__args__", ())]:
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    todo.append(arg)
    return found


def test_every_settings_section_is_a_strict_model():
    """Unknown keys are errors and assignments are validated in every section (SandboxConfig
    was a plain BaseModel: `cfg.sandbox.timeout_s = "soon"` went through)."""
    sections = _settings_sections()
    from beacon.sandbox.config import SandboxConfig

    assert SandboxConfig in sections
    assert [m.__name__ for m in sections if not issubclass(m, StrictModel)] == []


def test_sandbox_settings_are_validated_on_assignment():
    from beacon.sandbox.config import SandboxConfig

    cfg = SandboxConfig()
    with pytest.raises(ValueError, match="timeout_s"):
        cfg.timeout_s = "soon"
    with pytest.raises(ValueError, match="timeout_s: must be > 0"):
        cfg.timeout_s = -1.0
