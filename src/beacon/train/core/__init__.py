"""What every trainer shares: settings, set-up, the loop, checkpoints, metrics, data encoding."""
