"""Command-line tools: ``train`` and ``play`` (one run), ``sweep`` (seeds and grids),
``tune`` (Optuna), ``plot`` (curves) and ``report`` (tables with confidence intervals)."""
