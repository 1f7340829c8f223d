"""Deprecated: the test fixtures moved to `beacon.fakes`; these re-exports go after one release."""

import warnings

warnings.warn(
    "beacon.testing moved to beacon.fakes (beacon.testing.script_choice is beacon.fakes.logits); "
    "import from beacon.fakes",
    DeprecationWarning,
    stacklevel=2,
)
