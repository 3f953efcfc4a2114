"""Command-line entry points: ``python -m alf.bin.train`` and ``python -m alf.bin.play``."""
