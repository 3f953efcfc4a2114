"""ALF benchmarks: reliability (see benchmarks/README.md)."""
