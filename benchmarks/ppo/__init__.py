"""ALF benchmarks: ppo (see benchmarks/README.md)."""
