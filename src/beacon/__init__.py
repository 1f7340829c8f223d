"""Beacon: agentic visual reasoning — evaluate, train and distill VLMs that write code to see."""

__version__ = "0.1.0"
