"""Placeholder."""


def run() -> None:
    """Run one episode."""
