"""Fixtures for tests and benchmarks on tiny models, kept in the package so `benchmarks/` and
downstream tests can use them: scripted Thyme-format trajectories (`trajectories`) and a
scripted-choice sampler that gives a random tiny model real choices (`script_choice`). Not for
real models."""
