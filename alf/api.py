"""ALF from Python (a notebook, a script): train a run, load one, act and evaluate.

::

    import alf

    run = alf.train("alf/examples/ppo_cart_pole.gin", root_dir="/tmp/ppo",
                    bindings={"TrainerConfig.num_env_steps": 20000})
    run.status()["state"]             # 'finished'
    result = run.evaluate(num_episodes=10)
    result.returns, result.lengths   # per episode
    policy = run.policy               # callable: observation -> action
    alf.load("/tmp/ppo")              # the same Run, from its directory

The run directory is the same one ``python -m alf.bin.train`` writes (config,
checkpoints, ``progress.jsonl``, ``status.json``), so ``play``, ``sweep``, ``plot`` and
``report`` read it as any other; training again on it resumes, and a run that has used
its budget is left as it is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from alf.run_dir import layout

__all__ = ["Run", "load", "train"]


def _binding_lines(bindings: Mapping[str, Any] | Sequence[str]) -> list[str]:
    """``'Name.param=value'`` lines: a mapping's values are Python values written as gin
    literals (``repr``), except strings that start with ``@`` (a configurable reference)
    or ``%`` (a macro), kept as written; a sequence is already such lines."""
    if isinstance(bindings, Mapping):
        lines = []
        for name, value in bindings.items():
            text = value if isinstance(value, str) and value[:1] in "@%" else repr(value)
            lines.append(f"{name}={text}")
        return lines
    return [str(line) for line in bindings]


def train(
    conf: str | None,
    *,
    root_dir: str,
    bindings: Mapping[str, Any] | Sequence[str] = (),
) -> Run:
    """Trains a config into ``root_dir`` (or resumes the run there), as
    ``python -m alf.bin.train --conf=CONF --root_dir=ROOT_DIR --conf_param=...`` does.

    Args:
        conf: the ``.gin`` file (None: bindings only).
        root_dir: the run's directory (created if missing).
        bindings: gin bindings that win over ``conf``: ``{"TrainerConfig.num_env_steps":
            20000}`` (values as Python literals; a string starting with ``@`` is a
            configurable reference) or ``["TrainerConfig.num_env_steps=20000"]``.

    Returns:
        The :class:`Run` in ``root_dir``.

    Raises:
        alf.errors.UserError: a bad config, environment, checkpoint or ``root_dir`` (the
            message is the line the command-line tool prints).
        alf.errors.TrainingError: training started and could not go on (the last
            checkpoint is kept; ``status.json`` says ``failed``).
    """
    from alf import config as alf_config
    from alf.configurables import import_configurables
    from alf.trainers import RLTrainer, TrainerConfig

    root_dir = os.path.abspath(os.path.expanduser(root_dir))
    import_configurables()
    alf_config.load_config(conf, _binding_lines(bindings))
    trainer = RLTrainer(config=TrainerConfig(), root_dir=root_dir)
    try:
        trainer.train()
    finally:
        trainer.close()
    return Run(root_dir=root_dir)


def load(root_dir: str, *, trusted_modules: Sequence[str] = ()) -> Run:
    """The run in ``root_dir`` (trained by the CLI or by :func:`train`).

    Args:
        root_dir: the run's directory.
        trusted_modules: modules the run's ``config.gin`` may import (your own
            configurables; see ``docs/security.md``).

    Raises:
        alf.run_dir.layout.RunDirError: ``root_dir`` is not a run's directory.
    """
    root_dir = os.path.abspath(os.path.expanduser(root_dir))
    layout.check_run_dir(root_dir)
    return Run(root_dir=root_dir, trusted_modules=tuple(trusted_modules))


@dataclass
class Run:
    """A run directory, for reading and acting: its status, progress records,
    evaluation, and policy (built from its ``config.gin``, read as data, and its newest
    checkpoint, or ``checkpoint``).

    Attributes:
        root_dir: the run's directory.
        trusted_modules: modules its ``config.gin`` may import.
        checkpoint: the iteration (or file) of the checkpoint to act with; None: newest.
    """

    root_dir: str
    trusted_modules: tuple[str, ...] = ()
    checkpoint: int | str | None = None
    _policy: Any = field(default=None, repr=False)

    def status(self) -> dict[str, Any] | None:
        """``status.json``: ``state`` (running, finished, stopped, failed,
        interrupted), the error of a failed run, the step counts."""
        return layout.read_status(self.root_dir)

    def progress(self) -> list[dict[str, Any]]:
        """The records of ``progress.jsonl``: training summaries and evaluations."""
        return layout.read_progress(self.root_dir)

    def evaluations(self) -> list[dict[str, Any]]:
        """The records of ``evaluations.jsonl``: each evaluation's ``iteration``,
        ``env_steps`` and per-episode ``returns`` and ``lengths``."""
        return layout.read_evaluations(self.root_dir)

    def _rebuild(self, *, seed: int | None = None, render_mode: str | None = None) -> Any:
        from alf.configurables import import_configurables
        from alf.trainers.trained_run import load_trained_run

        import_configurables()
        return load_trained_run(
            self.root_dir,
            checkpoint=self.checkpoint,
            seed=seed,
            render_mode=render_mode,
            trusted_modules=self.trusted_modules,
        )

    @property
    def policy(self) -> Any:
        """The greedy policy (:class:`alf.algorithms.policy.Policy`): call it with an
        observation, get the action ``play`` would take."""
        if self._policy is None:
            from alf.algorithms.policy import Policy

            env, algorithm = self._rebuild()
            env.close()
            self._policy = Policy(algorithm=algorithm.eval())
        return self._policy

    def evaluate(
        self,
        num_episodes: int = 10,
        *,
        seed: int = 12345,
        max_episode_steps: int | None = None,
        exploring: bool = False,
    ) -> Any:
        """Plays ``num_episodes`` greedy episodes (exploring ones with ``exploring``:
        ``rollout_step``'s sampled actions) on a fresh evaluation environment, as
        ``alf.bin.play`` does.

        Returns:
            :class:`alf.trainers.evaluator.EvalResult`: ``returns`` and ``lengths`` per
            episode, ``average_return``.
        """
        from alf.algorithms.policy import Policy
        from alf.trainers.evaluator import Evaluator

        env, algorithm = self._rebuild(seed=seed)
        try:
            evaluator = Evaluator(
                env=env,
                policy=Policy(algorithm=algorithm),
                num_episodes=num_episodes,
                max_episode_steps=max_episode_steps,
                cap_setting="max_episode_steps",
                exploring=exploring,
            )
            return evaluator.evaluate()
        finally:
            env.close()
