"""Trainers: the training loop, evaluation and checkpoints."""

from alf.run_dir.checkpoints import Checkpointer, CheckpointError
from alf.trainers.evaluator import EvalResult, Evaluator
from alf.trainers.rl_trainer import RLTrainer, TrainingDivergedError, build_algorithm
from alf.trainers.trainer_config import TrainerConfig

__all__ = [
    "CheckpointError",
    "Checkpointer",
    "EvalResult",
    "Evaluator",
    "RLTrainer",
    "TrainerConfig",
    "TrainingDivergedError",
    "build_algorithm",
]
