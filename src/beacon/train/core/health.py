"""Training health: the numbers behind the alarms, and the alarms over them.

The numbers come from the trainers (the pure functions below: sampler log-prob gap, entropy,
tool rates, zero-variance groups; OPD's teacher-student gap; the rollout checks' dropped share);
`HealthMonitor` decides, once per step in `loop.run`, which alarms fire (`RULES`, thresholds in
`HealthConfig`), adds `health/alarm/<name>` (1 firing, 0 not; absent when the step has no value)
and `health/alarms` to the step's metrics, and logs ONE warning line for each alarm as it starts
firing (not again while it keeps firing). With `health.stop_on_alarm` the loop saves the step's
checkpoint and raises `HealthAlarmError`, so the run stops where it went wrong and resumes from
there.

Noisy metrics are compared through their rolling mean over `health.window` logged steps
(non-finite values skipped); OPD's teacher-student gap, a mean over few tokens per step, over
`health.teacher_student_gap_window` steps. On resume the monitor replays the run's
`metrics.jsonl` up to the restored step, so windows and "was it firing" continue where they
were (exactly with `train.log_every: 1`; with sparser logging, from the logged steps).

The numbers, as pure functions:

Per token, over the generated (loss-masked) positions of a step's rollouts:

    sampler log-prob gap  = mean_t |log π_sampler(y_t) − log π_trainer(y_t)|
    entropy               = mean_t H_t,   H_t = −Σ_v p_t(v) log p_t(v)

Both sides of the gap are log-probs of the *raw* distribution (temperature 1, no top-p/top-k,
no logits processor): the engines record those (`beacon.engines.hf`, vLLM's
`raw_logprobs`), and the trainer's forward gives them, so the gap is ~0 for any sampling
settings when the engine holds the trainer's weights, and grows with stale weights, another
chat template or misplaced image positions. The entropy is that of the trainer's next-token
distribution at the sampled positions.

Per group (un-hinted groups: the policy's own behaviour):

    tool_rate              = share of responses that wrote a tool call
    tool_rate_easy / _hard = the same over the groups whose item the run labels easy / hard
                             (`GroupOutcomes.label`, e.g. synth's `metadata["difficulty"]`)
    zero_variance_groups   = share of groups whose rewards are all equal (no advantage, no
                             learning signal)
"""

from __future__ import annotations

import logging
import math
import operator
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from beacon.errors import UserError
from beacon.train.core.config import HealthConfig
from beacon.train.core.outcomes import GroupOutcomes

logger = logging.getLogger(__name__)


class HealthAlarmError(UserError):
    """A health alarm fired with `health.stop_on_alarm` set; the step's checkpoint is saved."""


@dataclass
class Series:
    """One metric's last `window` finite values, the highest rolling mean so far and the
    first full window's mean."""

    window: int
    values: deque[float] = field(default_factory=deque)
    peak: float = -math.inf  # highest rolling mean before the current step
    first: float | None = None  # the mean of the first full window: the run's starting level

    def push(self, value: float) -> None:
        self.values.append(value)
        if len(self.values) > self.window:
            self.values.popleft()

    def settle(self, mean: float) -> None:
        """Fold the current step's rolling mean into the peak and, once the window is full, the
        first mean; after the rules read them."""
        self.peak = max(self.peak, mean)
        if self.first is None and len(self.values) == self.window:
            self.first = mean

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)


Limit = Callable[[float, Series, HealthConfig], float | None]
"""(the value compared, its series, the settings) -> the limit it crossed, or None."""


@dataclass(frozen=True)
class Rule:
    """One alarm: the metric it reads, per step or rolling, when it fires and what to do;
    `window` names the `HealthConfig` setting that sizes its rolling mean."""

    name: str
    key: str
    rolling: bool
    relation: str
    limit: Limit
    advice: str
    window: str = "window"


def _bound(setting: str, crosses: Callable[[float, float], bool]) -> Limit:
    """The limit `HealthConfig.<setting>`, crossed when `crosses(value, limit)`."""

    def limit(value: float, series: Series, cfg: HealthConfig) -> float | None:
        bound = getattr(cfg, setting)
        return bound if bound is not None and crosses(value, bound) else None

    return limit


def _collapsed(value: float, series: Series, cfg: HealthConfig) -> float | None:
    """Below `tool_rate_min` after having been at or above it (a fall, not a model that never
    used tools)."""
    bound = cfg.tool_rate_min
    return bound if bound is not None and value < bound <= series.peak else None


def _grown(value: float, series: Series, cfg: HealthConfig) -> float | None:
    """Above `teacher_student_gap_growth` times the first full window's mean (where the run
    started), and above `teacher_student_gap_floor` (float noise grows by any ratio).

    The baseline is the first window, not the lowest rolling mean so far: the per-step gap is a
    mean over a few tokens whose standard deviation is about its mean (the demo's OPD runs), so
    the lowest of many rolling means lies far below the run's level, and a ratio to it fires on
    healthy runs. The k1 estimate can be negative: a baseline at or below 0 leaves the floor."""
    factor = cfg.teacher_student_gap_growth
    if factor is None or series.first is None:
        return None
    bound = max(factor * max(series.first, 0.0), cfg.teacher_student_gap_floor)
    return bound if value > bound else None


RULES = (
    Rule(
        "sampler_logprob_gap",
        "health/sampler_logprob_gap",
        False,
        ">",
        _bound("logprob_gap_max", operator.gt),
        "the rollout engine does not sample from the trained policy: check that weights reach "
        "it after every step (rollout.servers, the weight push), and that engine and trainer "
        "use the same chat template, image processor and dtype",
    ),
    Rule(
        "tool_rate_collapse",
        "health/tool_rate",
        True,
        "<",
        _collapsed,
        "tool use collapsed: lower the tool-free reward (rl.reward, rl.naar.code_reward), "
        "enable HGCE (rl.hgce.enabled) or resume from an earlier checkpoint with a lower lr",
    ),
    Rule(
        "tool_rate_easy_saturated",
        "health/tool_rate_easy",
        True,
        ">=",
        _bound("tool_rate_easy_max", operator.ge),
        "tools on nearly every easy item: use the necessity-aware reward (rl.reward=naar) or the "
        "blog reward's easy-item penalty (rl.blog.gamma)",
    ),
    Rule(
        "zero_variance_groups",
        "health/zero_variance_groups",
        True,
        ">",
        _bound("zero_variance_max", operator.gt),
        "almost no group has a reward difference: raise rollout.group_size, enable HGCE for "
        "all-wrong groups, or train on items of the policy's level",
    ),
    Rule(
        "entropy_collapse",
        "health/entropy",
        True,
        "<",
        _bound("entropy_min", operator.lt),
        "the policy stopped exploring: lower train.lr, use clip-higher (rl.loss.clip_eps_high) "
        "or raise agent.temperature",
    ),
    Rule(
        "teacher_student_gap_growth",
        "health/teacher_student_gap",
        True,
        ">",
        _grown,
        "the student drifts away from its teacher: lower train.lr, check the teacher's context "
        "(teacher.context, teacher_check.json) and the critic's reflections",
        window="teacher_student_gap_window",
    ),
    Rule(
        "trajectories_dropped",
        "health/dropped_share",
        False,
        ">",
        _bound("dropped_max", operator.gt),
        "trajectories are not what the engine sampled (health/dropped/<reason>): check the "
        "engine's and trainer's processors, templates and the image store",
    ),
)


@dataclass(frozen=True)
class Alarm:
    """One alarm firing at a step: the metric's value and the limit it crossed."""

    rule: Rule
    step: int
    value: float
    limit: float

    @property
    def message(self) -> str:
        rule = self.rule
        shown = f"rolling mean of {rule.key}" if rule.rolling else rule.key
        return (
            f"health alarm {rule.name} at step {self.step}: {shown} = {self.value:.4g} "
            f"{rule.relation} {self.limit:.4g}; {rule.advice}"
        )


class HealthMonitor:
    """Evaluates `RULES` on each step's metrics (module docstring)."""

    def __init__(self, cfg: HealthConfig, log: bool = True) -> None:
        self.cfg, self.log = cfg, log
        self.series = {rule.name: Series(getattr(cfg, rule.window)) for rule in RULES}
        self.firing: set[str] = set()

    def replay(self, rows: Iterable[dict[str, Any]]) -> None:
        """Feed earlier steps' metrics (a resumed run's history) without logging."""
        for row in rows:
            self._evaluate(dict(row))

    def check(self, metrics: dict[str, Any]) -> list[Alarm]:
        """The alarms firing at this step; adds their flags to `metrics` and logs the new ones."""
        before = set(self.firing)
        alarms = self._evaluate(metrics)
        if self.log:
            for alarm in alarms:
                if alarm.rule.name not in before:
                    logger.warning(alarm.message)
        return alarms

    def _evaluate(self, metrics: dict[str, Any]) -> list[Alarm]:
        alarms = []
        for rule in RULES:
            value = metrics.get(rule.key)
            if not isinstance(value, int | float) or not math.isfinite(value):
                continue
            series = self.series[rule.name]
            series.push(float(value))
            compared = series.mean if rule.rolling else float(value)
            limit = rule.limit(compared, series, self.cfg)
            series.settle(compared)
            metrics[f"health/alarm/{rule.name}"] = int(limit is not None)
            if limit is None:
                self.firing.discard(rule.name)
                continue
            self.firing.add(rule.name)
            alarms.append(Alarm(rule, int(metrics.get("step", 0)), compared, limit))
        metrics["health/alarms"] = len(alarms)
        return alarms


def stop_error(alarms: list[Alarm], checkpoint: str) -> HealthAlarmError:
    """The error that stops a run on `alarms` (`health.stop_on_alarm`)."""
    lines = "; ".join(a.message for a in alarms)
    return HealthAlarmError(
        f"training stopped by health.stop_on_alarm: {lines}. {checkpoint} is saved; fix the "
        "cause and rerun with --resume, or resume with --set health.stop_on_alarm=false to "
        "train on"
    )


@dataclass
class TokenHealth:
    """Sums over a step's generated tokens: |gap| where the sampler gave a log-prob, entropy
    everywhere; `as_metrics` gives the means (NaN without tokens)."""

    gap_sum: float = 0.0
    gap_tokens: int = 0
    entropy_sum: float = 0.0
    entropy_tokens: int = 0

    def add(self, other: TokenHealth) -> None:
        """Add another batch's sums (micro-batches, processes) into these."""
        self.gap_sum += other.gap_sum
        self.gap_tokens += other.gap_tokens
        self.entropy_sum += other.entropy_sum
        self.entropy_tokens += other.entropy_tokens

    def as_list(self) -> list[float]:
        """The four sums, for a reduction over processes (`from_list` reads them back)."""
        return [self.gap_sum, self.gap_tokens, self.entropy_sum, self.entropy_tokens]

    @classmethod
    def from_list(cls, values: Sequence[float]) -> TokenHealth:
        return cls(float(values[0]), int(values[1]), float(values[2]), int(values[3]))

    def as_metrics(self) -> dict[str, float]:
        """The means as `health/` metrics (NaN where no token was counted)."""
        return {
            "health/sampler_logprob_gap": _ratio(self.gap_sum, self.gap_tokens),
            "health/entropy": _ratio(self.entropy_sum, self.entropy_tokens),
        }


def logprob_gap_sum(trainer_logp: Tensor, sampler_logp: Tensor, mask: Tensor) -> tuple[float, int]:
    """Σ |sampler − trainer| log-prob over `mask` and the number of tokens summed (all [B, L]).

    `sampler_logp` is NaN where the sampler gave none (a hinted row, whose sampled context is
    not the trained one; an engine without log-probs); those positions add nothing.
    """
    on = mask.bool() & sampler_logp.isfinite()
    return float((sampler_logp - trainer_logp).abs()[on].sum()), int(on.sum())


def entropy_sum(logits: Tensor, mask: Tensor, chunk_size: int = 1024) -> tuple[float, int]:
    """Σ_t H_t over the positions t of `mask` [B, L] and their number; H_t = −Σ_v p log p of
    the distribution that predicts token t (from `logits` [B, L, V] at t − 1), computed over
    `chunk_size` positions at a time (never a second [B, L, V] tensor)."""
    picked = logits[:, :-1][mask[:, 1:].bool()]
    total = 0.0
    for start in range(0, picked.shape[0], chunk_size):
        logp = torch.log_softmax(picked[start : start + chunk_size].float(), dim=-1)
        total += float(-(logp.exp() * logp).sum())
    return total, int(picked.shape[0])


def chunked_logprob_entropy(
    hidden: Tensor, weight: Tensor, ids: Tensor, chunk_size: int, bias: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Full-vocabulary log-prob of `ids` [T] and entropy [T] from final hidden states [T, H]
    and the output projection `weight` [V, H], holding one [chunk_size, V] block at a time
    (no gradient: these are measurements)."""
    logps, entropies = [], []
    with torch.no_grad():
        for start in range(0, hidden.shape[0], chunk_size):
            block = hidden[start : start + chunk_size] @ weight.T
            if bias is not None:
                block = block + bias
            logp = torch.log_softmax(block.float(), dim=-1)
            picked = ids[start : start + chunk_size].unsqueeze(-1)
            logps.append(logp.gather(-1, picked).squeeze(-1))
            entropies.append(-(logp.exp() * logp).sum(-1))
    if not logps:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty
    return torch.cat(logps), torch.cat(entropies)


def group_health(
    groups: Sequence[GroupOutcomes], rewards: Sequence[Sequence[float]] | None = None
) -> dict[str, float]:
    """`health/tool_rate`, `health/tool_rate_easy`, `health/tool_rate_hard` over the un-hinted
    groups, and with `rewards` (aligned to `groups`) `health/zero_variance_groups`."""
    own = [i for i, g in enumerate(groups) if not g.hinted]

    def rate(label: str | None) -> float:
        used = [u for i in own if label in (None, groups[i].label) for u in groups[i].used_tool]
        return _ratio(sum(used), len(used))

    out = {
        "health/tool_rate": rate(None),
        "health/tool_rate_easy": rate("easy"),
        "health/tool_rate_hard": rate("hard"),
    }
    if rewards is not None:
        flat = [max(rewards[i]) == min(rewards[i]) for i in own if rewards[i]]
        out["health/zero_variance_groups"] = _ratio(sum(flat), len(flat))
    return out


def _ratio(total: float, count: int) -> float:
    return total / count if count else math.nan
