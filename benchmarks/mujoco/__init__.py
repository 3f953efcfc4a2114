"""ALF benchmarks: mujoco (see benchmarks/README.md)."""
