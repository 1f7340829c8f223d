"""Beacon: agentic visual reasoning — evaluate, train and distill VLMs that write code to see."""

from beacon import moved

__version__ = "0.1.0"

moved.install()  # old import paths of moved modules, for one release (`beacon.moved.MOVED`)
