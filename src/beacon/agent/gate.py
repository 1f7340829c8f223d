"""The inference gate of `gated` mode: the model's own P(tool) picks the text-only or the tool path.

Tool calls cost 0.5-3 s each, so a deployment can skip them where the model would not use them
anyway (the Beacon blog, "工程实践": `TOOL_THRESHOLD = 0.7`, `adaptive_inference`). Before a
`gated` episode the gate scores p_tool for the item; below `agent.gate.threshold` the episode runs
as `notool` (no sandbox, no tool instructions), at or above it as `tool`.

Definition. Let x be the opening context of the item's *tool*-mode episode (system prompt with
the tool instructions, images, question, Thyme's path and size lines, then the assistant turn's
generation prompt): the first decision point, where the model either opens a call or does not.
Let c_1..c_n be the format's call-open marker (`Format.call_open`, e.g. "<code>") tokenized on
its own, r the text of its last token c_n, and V_r the tokens whose text starts with r. Then

    p_tool(x) = prod_{j<n} p(c_j | x, c_<j) * sum_{v in V_r} p(v | x, c_<n)

the probability that the response begins with the marker: its first n-1 tokens as the
tokenizer writes them, then any token that completes it. The sum matters: byte-level BPE merges
the marker's last piece with what follows it (Qwen2's pre-tokenizer splits "<code>\\n```python"
into "<code", ">\\n", "```", "python", so a Thyme response holds the token ">\\n" where the
marker alone ends in ">", and p(">") misses that mass), and V_r holds every such merge. A
marker that is one token (the tiny model's "<code>", Qwen2.5's "<tool_call>") gives n = 1:
p_tool is the summed probability of the tokens that begin with it. p are the raw model
probabilities (temperature 1), so p_tool does not depend on the sampling settings.

It is computed by one scoring pass (`beacon.engines.scoring`): exactly with engines that score
(`hf`), else from the top-20 log-probs an OpenAI-compatible server returns (a token left out of
them counts 0; one left out has probability below 1/21, so the decision changes only at
thresholds under 0.05 or when many small merges of the last piece carry the mass).

By default the policy scores p_tool; `agent.gate.engine` names a separate small model that
scores it instead (the blog's "lightweight classifier"), under the same definition and prompt.

Deviations from the blog and what is not covered:

1. The blog's `predict_tool_necessity` is unspecified; p_tool is the model's own probability of
   opening a code block *first thing*. A model that writes reasoning before its code (" Let me
   zoom in. <code>...") gets a low p_tool although it would use the tool: for such models use a
   gate model trained for it, or a lower threshold.
2. Tokenizations of the marker other than the canonical one (e.g. "<co", "de>") are not summed;
   a model trained on canonically tokenized text gives them almost no mass.
3. The gate sees the tool-mode prompt, image paths included, so the sandbox session is opened
   before the decision; the notool path closes it unused (a few ms).
4. Gate passes are not batched across episodes: each is its own forward pass (the `hf` engine
   runs it between generation batches).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from PIL import Image

from beacon.agent.formats import Format
from beacon.engines.base import ChatTokenizer, Engine, GenerationRequest, Message
from beacon.engines.scoring import ScoreRequest, ScoreResult, ascore
from beacon.errors import UserError
from beacon.types import GateDecision

GatePath = Literal["tool", "notool"]


class GateError(RuntimeError):
    """The gate could not score an item (the engine failed); the episode ends in engine_error."""


@dataclass(frozen=True)
class MarkerTokens:
    """The call-open marker in one tokenizer: c_1..c_{n-1} (`prefix`), the text r of c_n
    (`last`) and V_r, every token whose text starts with r (`completions`)."""

    prefix: list[int]
    last: str
    completions: list[int]


def marker_tokens(tokenizer: ChatTokenizer, marker: str) -> MarkerTokens:
    """`MarkerTokens` of `marker`; V_r is found by decoding every token of the vocabulary once."""
    ids = tokenizer.encode(marker)
    if not ids or tokenizer.decode(ids) != marker:
        raise ValueError(f"the tokenizer does not write the marker {marker!r} back as itself")
    last = marker[len(tokenizer.decode(ids[:-1])) :]
    vocabulary = tokenizer.tokenizer  # HFTokenizer's own Hugging Face tokenizer
    texts = vocabulary.batch_decode(
        [[v] for v in range(len(vocabulary))], skip_special_tokens=False
    )
    completions = [v for v, text in enumerate(texts) if text.startswith(last)]
    return MarkerTokens(prefix=ids[:-1], last=last, completions=completions)


def p_tool_of(result: ScoreResult) -> float:
    """p_tool = prod_{j<n} p(c_j | x, c_<j) * sum_{v in V_r} p(v | x, c_<n)  (module docstring).

    `result` scores the marker's prefix (`logprobs`) and V_r (`candidate_logprobs`); a token
    the engine did not see (None) counts as probability 0. Summed in float64.
    """
    if any(lp is None for lp in result.logprobs):
        return 0.0
    head = math.exp(math.fsum(result.logprobs))
    tail = math.fsum(math.exp(lp) for lp in result.candidate_logprobs if lp is not None)
    return min(1.0, head * tail)


def route(p_tool: float, threshold: float) -> GatePath:
    """The blog's rule: the fast text-only path below the threshold, the tool path at or above."""
    return "notool" if p_tool < threshold else "tool"


class ToolGate:
    """Scores p_tool with `engine` (the policy, or a separate gate model) and picks the path.

    `scorer` names the scoring model in each `GateDecision` ("policy" by default).
    """

    def __init__(
        self, engine: Engine, fmt: Format, threshold: float, scorer: str = "policy"
    ) -> None:
        if engine.tokenizer is None:
            raise UserError(
                f"gated mode needs the token ids of {fmt.call_open!r}, but engine "
                f"{engine.name!r} has no local tokenizer; set engine.tokenizer=/path/to/the/"
                "model's/processor (or agent.gate.engine.tokenizer for a gate model)"
            )
        if not 0 <= threshold <= 1:
            raise ValueError(f"threshold={threshold} must be in [0, 1] (agent.gate.threshold)")
        self.engine, self.threshold, self.scorer = engine, threshold, scorer
        self.marker = marker_tokens(engine.tokenizer, fmt.call_open)

    async def p_tool(self, messages: list[Message], images: Sequence[Image.Image]) -> float:
        """p_tool of the opening context `messages` (the tool-mode first turn)."""
        request = ScoreRequest(
            GenerationRequest(messages=messages, images=list(images)),
            continuation=list(self.marker.prefix),
            candidates=list(self.marker.completions),
        )
        (result,) = await ascore(self.engine, [request])
        if result.error is not None:
            raise GateError(f"the gate could not score p_tool: {result.error}")
        return p_tool_of(result)

    async def decide(self, messages: list[Message], images: Sequence[Image.Image]) -> GateDecision:
        """Score p_tool and pick the path (`route`)."""
        start = time.monotonic()
        p = await self.p_tool(messages, images)
        elapsed = time.monotonic() - start
        return GateDecision(p, self.threshold, route(p, self.threshold), self.scorer, elapsed)
