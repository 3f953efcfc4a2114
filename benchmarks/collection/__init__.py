"""ALF benchmarks: collection (see benchmarks/README.md)."""
