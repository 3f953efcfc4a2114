"""ALF benchmarks: peers (see benchmarks/README.md)."""
