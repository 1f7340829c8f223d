"""Deprecated re-export of `beacon.fakes.logits`; goes after one release."""

from beacon.fakes.logits import (
    CROP_CALL,
    NoEndOfSequence,
    ScriptChoice,
    next_script_tokens,
    synth_choices,
)

__all__ = ["CROP_CALL", "NoEndOfSequence", "ScriptChoice", "next_script_tokens", "synth_choices"]
