"""Logits processors that steer a random tiny model, for tests and benchmarks.

A random tiny model never writes a code block or a right answer by itself. `ScriptedTokens`
forces one script of token ids. `ScriptChoice` allows, in turn n, only continuations of the
scripts `turns[n]`; unlike a forcing script, the model's own logits choose among the allowed next
tokens, so sampling picks a script by the policy's probabilities and training moves them: real
rewards, real advantages, real updates, on CPU in seconds (GRPO on the tiny model would otherwise
drop every group). `synth_choices` builds one for synth items: turn 0 answers one of the given
items' answers or crops; turn 1 (after the crop's observation) answers. `HintGate` steers rows
sampled with a hint apart from the others. `NoEndOfSequence` keeps a request running to its
max_tokens. Not for real models.

An engine takes them as `HFEngine(logits_processors=[...])`, or, where the engine is built inside
a recipe, as a factory of the tokenizer (`run_grpo(cfg, logits_processors=...)`,
`beacon.engines.hf.LogitsProcessorFactory`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


class ScriptedTokens:
    """A logits processor that forces the model to write `script` (a list of token ids).

    Stateless: at each step it finds the longest suffix of the row's ids that is a prefix of the
    script and forces the next script token, so every generate call writes the script from its
    start (and starts over after finishing it; end the script with a stop string or EOS).
    """

    def __init__(self, script: Sequence[int]) -> None:
        if not script:
            raise ValueError("ScriptedTokens needs a non-empty script of token ids")
        self.script = list(script)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        forced = torch.full_like(scores, float("-inf"))
        for row in range(input_ids.shape[0]):
            step = matched_prefix(input_ids[row].tolist(), self.script)
            forced[row, self.script[step % len(self.script)]] = 0.0
        return forced


def matched_prefix(ids: list[int], script: list[int]) -> int:
    """Length of the longest suffix of `ids` (shorter than the script) that starts `script`."""
    for k in range(min(len(script) - 1, len(ids)), 0, -1):
        if ids[-k:] == script[:k]:
            return k
    return 0


CROP_CALL = "Zoom. <code>\n```python\nimage.crop((0, 0, 40, 30)).show()\n```\n</code>"


class ScriptChoice:
    """Logits processor: only continuations of the scripts of the row's current turn survive.

    Turn n is counted by the `marker` tokens (the observation close tag) the row holds; the
    longest suffix of the row that begins some script decides which tokens may come next.
    """

    def __init__(self, turns: Sequence[Sequence[Sequence[int]]], marker: int) -> None:
        self.turns = [[list(s) for s in scripts] for scripts in turns]
        self.marker = marker

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        out = torch.full_like(scores, float("-inf"))
        for row in range(input_ids.shape[0]):
            ids = input_ids[row].tolist()
            scripts = self.turns[min(ids.count(self.marker), len(self.turns) - 1)]
            allowed = next_script_tokens(ids, scripts)
            out[row, allowed] = scores[row, allowed]
        return out


def next_script_tokens(ids: list[int], scripts: list[list[int]]) -> list[int]:
    """Tokens that continue the longest script prefix ending `ids` (script starts if none)."""
    longest = max(len(s) for s in scripts)
    for k in range(min(longest - 1, len(ids)), 0, -1):
        found = [s[k] for s in scripts if len(s) > k and ids[-k:] == s[:k]]
        if found:
            return sorted(set(found))
    return sorted({s[0] for s in scripts})


def synth_choices(tokenizer: Any, answers: Sequence[str]) -> ScriptChoice:
    """Turn 0: `<answer>a</answer>` for each a in `answers`, or the crop call; turn 1: answer."""
    scripted = [tokenizer.encode(f"<answer>{a}</answer>") for a in answers]
    marker = tokenizer.encode("</sandbox_output>")[0]
    return ScriptChoice([[*scripted, tokenizer.encode(CROP_CALL)], scripted], marker)


class HintGate:
    """Logits processor: rows whose ids hold `marker` (a hint's token ids, so: sampled with the
    hint in the prompt) are steered by `hinted`, the others by `plain`. A test makes the
    un-hinted groups all wrong and lets hinted ones answer right, so HGCE rescues exactly where
    the hint text reached the prompt."""

    def __init__(self, marker: Sequence[int], hinted: ScriptChoice, plain: ScriptChoice) -> None:
        if not marker:
            raise ValueError("HintGate needs the non-empty token ids of a hint to look for")
        self.marker, self.hinted, self.plain = list(marker), hinted, plain

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(scores)
        for row in range(input_ids.shape[0]):
            ids = input_ids[row].tolist()
            size = len(self.marker)
            seen = any(ids[i : i + size] == self.marker for i in range(len(ids) - size + 1))
            steer = self.hinted if seen else self.plain
            out[row : row + 1] = steer(input_ids[row : row + 1], scores[row : row + 1])
        return out


class NoEndOfSequence:
    """Logits processor that keeps end-of-sequence away, so a request runs to its max_tokens,
    and counts the decode steps it saw (to tell that a long request has started)."""

    def __init__(self, eos: list[int]) -> None:
        self.eos, self.steps = eos, 0

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.steps += 1
        scores = scores.clone()
        scores[:, self.eos] = float("-inf")
        return scores
