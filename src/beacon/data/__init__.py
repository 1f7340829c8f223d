"""Training data: imports of public datasets into Beacon trajectories."""
