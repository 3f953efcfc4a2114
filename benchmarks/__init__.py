"""ALF benchmarks (see benchmarks/README.md)."""
