"""Deprecated re-export of `beacon.fakes.trajectories`; goes after one release."""

from beacon.fakes.trajectories import scripted_trajectory, synthetic_image

__all__ = ["scripted_trajectory", "synthetic_image"]
