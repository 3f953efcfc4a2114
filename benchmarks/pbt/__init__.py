"""ALF benchmarks: pbt (population-based training; see benchmarks/README.md)."""
