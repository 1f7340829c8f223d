"""Placeholder."""


def eval_command() -> None:
    """Evaluate."""


def report_command() -> None:
    """Report."""
