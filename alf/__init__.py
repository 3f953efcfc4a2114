"""ALF: a config-driven reinforcement-learning framework on PyTorch."""

__version__ = "0.1.0"
