"""The shared vocabulary: benchmark samples and agent trajectories as plain dataclasses.

A `Trajectory` is the record of one episode, kept **token-in, token-out**: each segment holds the
exact token ids the policy saw or produced (prompt, generated, observation, generated, ...), so
training consumes them as they are and nothing re-tokenizes model output. Images are stored by
reference (a content hash into the run's `ImageStore`, see `beacon.images`), which keeps one
trajectory to one JSON line and lets rollouts that share a crop store it once.

Engines that cannot give token ids (a hosted API) produce segments with text only; such
trajectories are fine for evaluation and expert data, and `Trajectory.has_token_ids` tells
training code to refuse them.
"""

from __future__ import annotations

import json
import zlib
from array import array
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from PIL import Image

ImageSource = Image.Image | str | Path | bytes
"""An image as a benchmark gives it: a decoded PIL image, a file path, or encoded bytes."""

SegmentRole = Literal["prompt", "generated", "observation"]

FinishReason = Literal[
    "answer",  # the model closed its final answer (</answer>, or stopped after one)
    "stop",  # the model ended its turn without an answer tag
    "max_turns",
    "max_tool_calls",
    "max_tokens",  # per-turn or total new-token budget spent
    "context_length",  # the episode's token budget (prompt, generated and observations) spent
    "max_images",  # the episode's image budget spent
    "engine_error",
    "sandbox_error",
    "input_error",  # the sample itself was unusable (e.g. an image that cannot be decoded)
]

TRUNCATED: frozenset[str] = frozenset(
    {"max_turns", "max_tool_calls", "max_tokens", "context_length", "max_images"}
)
"""Finish reasons of an episode cut off by a budget before it could answer: over-turn masking
(Mini-o3) leaves such episodes out of the loss instead of scoring them as wrong."""

AnswerType = Literal["choice", "number", "yesno", "text", "math", "list"]


@dataclass
class Sample:
    """One benchmark item.

    `options` maps option letters to option texts ("A" -> "red"); `answer` is the reference as the
    benchmark states it (a letter for choice items). `metadata` carries benchmark-specific facts:
    category, difficulty, ground-truth regions, the original row.
    """

    id: str
    images: list[ImageSource]
    question: str
    answer: str
    answer_type: AnswerType = "text"
    options: dict[str, str] | None = None
    benchmark: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def category(self) -> str | None:
        """The benchmark's category for per-category reports, if it has one."""
        value = self.metadata.get("category")
        return None if value is None else str(value)


def ids_fingerprint(token_ids: list[int]) -> int:
    """CRC-32 of a token id sequence: what an engine saw, recorded cheaply enough to check every
    trajectory against before it is trained on."""
    return zlib.crc32(array("q", token_ids).tobytes())


@dataclass
class EngineView:
    """What the engine had when it finished one generation: the context it was given plus what
    it generated (`tokens` ids with CRC-32 `fingerprint`), and `images` in that context.

    Recorded on the last generated segment of each engine call from the ids the engine reports
    (`GenerationResult.prompt_ids`), so a trainer can check that the ids it encodes are the ids
    the policy was sampled on (`beacon.train.core.consistency`).
    """

    tokens: int
    images: int
    fingerprint: int

    @classmethod
    def of(cls, token_ids: list[int], images: int) -> EngineView:
        return cls(len(token_ids), images, ids_fingerprint(token_ids))


@dataclass
class Segment:
    """A contiguous run of tokens with one role.

    `loss_mask[i]` is 1 where token i may carry training loss (generated tokens only; prompt and
    observation tokens are always 0); a text-only segment (no token ids) has one entry for all
    its tokens, or none (1). `logprobs[i]` is the sampling log-prob of generated token i
    under the policy that produced it; None for prompt/observation segments or when the engine
    gave none. `images` holds ImageStore keys of the images this segment introduces, in order.
    `kind` marks generated text ("text") vs code ("code") for per-segment sampling and metrics.
    `engine` is what the engine saw up to the end of this segment (`EngineView`), on the last
    segment of each engine call when the engine reported its context ids; None otherwise.
    """

    role: SegmentRole
    text: str
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    images: list[str] = field(default_factory=list)
    kind: str = "text"
    engine: EngineView | None = None

    def __post_init__(self) -> None:
        if isinstance(self.engine, dict):
            self.engine = EngineView(**self.engine)
        if not self.loss_mask and self.token_ids:
            self.loss_mask = [1 if self.role == "generated" else 0] * len(self.token_ids)


@dataclass
class EvidenceState:
    """What the agent had gathered after one tool call (ReVuE's evidence state e_j).

    `segment_index` is the index of the observation segment that closed the call;
    `token_position` the number of trajectory tokens up to and including it.
    """

    segment_index: int
    token_position: int
    images_available: int
    tool_calls: int
    code_tokens: int


@dataclass
class ImageCrop:
    """Where a tool-produced image came from: `box` (x0, y0, x1, y1) in the pixel frame of the
    sample's input image `frame` (0 = the first). A zoomed crop keeps its box in that frame, so a
    coordinate read off the returned image maps back to the original."""

    frame: int
    box: tuple[int, int, int, int]

    def __post_init__(self) -> None:
        self.box = tuple(int(v) for v in self.box)  # JSON gives a list back


@dataclass
class ToolCall:
    """One executed (or, in notool mode, attempted) tool call, with all the sandbox reported.

    `code` is what the model wrote (parsed out of its call); `executed_code` is what actually
    ran after the sandbox's code repair (equal to `code` when nothing was repaired; None when
    nothing ran), and `repairs` says what repair changed. Training data must record what was
    executed, not only what was written. `notes` are the sandbox's remarks that are not failures
    (images dropped over the cap, carried variables lost); the observation shows them.
    `image_crops[i]` is where returned image i was cropped from (`ImageCrop`), None where the
    sandbox could not tell (drawn, made with OpenCV, or read from a file it did not save).
    """

    code: str
    executed: bool
    ok: bool = False
    error: str | None = None
    timed_out: bool = False
    stdout: str = ""
    images: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    executed_code: str | None = None
    repairs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    image_crops: list[ImageCrop | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.image_crops = [ImageCrop(**c) if isinstance(c, dict) else c for c in self.image_crops]


@dataclass
class GateDecision:
    """The inference gate's choice for one `gated` episode (`beacon.agent.gate`).

    `p_tool` is the scorer's probability of opening a code block at the first decision point;
    below `threshold` the episode ran text-only (`path == "notool"`), else with tools. `scorer`
    names the model that scored ("policy", or the gate model); `elapsed_s` is the scoring time.
    """

    p_tool: float
    threshold: float
    path: Literal["tool", "notool"]
    scorer: str = "policy"
    elapsed_s: float = 0.0


@dataclass
class Trajectory:
    """One episode: segments, the final answer and how the episode went.

    For `mode == "hinted"` the first segment is the hinted prompt the responses were sampled
    from, and `original_prompt` holds the un-hinted prompt segment training swaps in (HGCE).
    A `gated` episode records the mode that ran ("tool" or "notool") and the gate's `gate`
    decision; other modes have `gate` None.
    """

    sample_id: str
    mode: str
    format: str
    segments: list[Segment] = field(default_factory=list)
    final_answer: str | None = None
    finish_reason: FinishReason = "stop"
    tool_calls: list[ToolCall] = field(default_factory=list)
    evidence: list[EvidenceState] = field(default_factory=list)
    original_prompt: Segment | None = None
    hint: str | None = None
    wall_time_s: float = 0.0
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    gate: GateDecision | None = None

    @property
    def used_tool(self) -> bool:
        """True when at least one tool call was executed (attempts in notool mode don't count)."""
        return any(c.executed for c in self.tool_calls)

    @property
    def truncated(self) -> bool:
        """True when a budget cut the episode off before it could answer (`TRUNCATED`)."""
        return self.finish_reason in TRUNCATED

    @property
    def num_tool_calls(self) -> int:
        """Tool calls the sandbox executed: the count behind the tool-call rate and NAAR's code
        reward."""
        return sum(c.executed for c in self.tool_calls)

    @property
    def attempted_tool_calls(self) -> int:
        """Tool calls the model wrote, executed or not (notool mode runs none but counts the
        attempts)."""
        return len(self.tool_calls)

    @property
    def code_tokens(self) -> int:
        """Generated tokens inside code segments, counted apart because code is sampled at its own
        temperature."""
        return sum(len(s.token_ids) for s in self.segments if s.kind == "code")

    @property
    def response_tokens(self) -> int:
        """Number of generated tokens (the response length of ReVuE's Figure 5)."""
        return sum(len(s.token_ids) for s in self.segments if s.role == "generated")

    @property
    def response_text(self) -> str:
        """Everything after the prompt, as the model saw it (generated text and observations)."""
        return "".join(s.text for s in self.segments if s.role != "prompt")

    @property
    def generated_text(self) -> str:
        """The model's own words (observations left out): what answer extraction reads."""
        return "".join(s.text for s in self.segments if s.role == "generated")

    @property
    def token_ids(self) -> list[int]:
        """Every segment's token ids in order: the exact sequence the trainer scores, never a
        re-tokenization of the text."""
        return [t for s in self.segments for t in s.token_ids]

    @property
    def loss_mask(self) -> list[int]:
        """1 where a token carries loss (the model's own generated tokens), 0 on prompt and
        observation tokens; aligned with `token_ids`."""
        return [m for s in self.segments for m in s.loss_mask]

    @property
    def has_token_ids(self) -> bool:
        """True when every segment with text has its token ids, so the trajectory can be trained on
        (a text-only served engine gives none)."""
        return all(s.token_ids or not s.text for s in self.segments)

    def to_json(self) -> str:
        """One JSON line; images are already references, so the line stays small."""
        return json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        """Rebuild a trajectory from `dataclasses.asdict` output (nested segments, calls, evidence,
        gate), as stored in trajectories.jsonl."""
        data = dict(data)
        data["segments"] = [Segment(**s) for s in data.get("segments", [])]
        data["tool_calls"] = [ToolCall(**c) for c in data.get("tool_calls", [])]
        data["evidence"] = [EvidenceState(**e) for e in data.get("evidence", [])]
        if data.get("original_prompt") is not None:
            data["original_prompt"] = Segment(**data["original_prompt"])
        if data.get("gate") is not None:
            data["gate"] = GateDecision(**data["gate"])
        return cls(**data)

    @classmethod
    def from_json(cls, line: str) -> Trajectory:
        """Inverse of `to_json`: one JSON line back to a trajectory."""
        return cls.from_dict(json.loads(line))
