"""ALF benchmarks: tools (see benchmarks/README.md)."""
