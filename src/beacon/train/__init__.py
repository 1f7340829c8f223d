"""Training: the shared accelerate loop, batching of trajectories, and the recipes (SFT)."""
