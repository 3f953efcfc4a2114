"""ALF benchmarks: offpolicy (see benchmarks/README.md)."""
