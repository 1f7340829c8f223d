"""Training data (beacon.md §2): pass@k difficulty, verified expert trajectories with text-only
mixing, answer-free hints, and import of Thyme's SFT format. See docs/data.md."""
