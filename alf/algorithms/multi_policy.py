"""Several policies in one batch: :class:`MultiPolicyAlgorithm`.

In a multi-agent game every agent is a batch row
(:mod:`alf.environments.pettingzoo_environment`), row ``r`` being agent ``r mod A``
(its ``env_id`` tells). A :class:`MultiPolicyAlgorithm` holds one algorithm per policy,
each with its own networks, optimizer, summaries (``<policy>/...``) and checkpoint
entries (``policies.<policy>.*``), and gives each the rows of the agents mapped to it:
its step hooks run every policy on its rows and put the results back in row order, and
:meth:`~MultiPolicyAlgorithm.learn` trains every policy that is not frozen on its rows of
the trajectory. The trainer builds it from ``TrainerConfig.policy_mapping`` (see
:func:`alf.environments.pettingzoo_games.policy_mapping`); all policies are built by the
same algorithm constructor, so their steps' outputs, states and infos have one structure.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from alf import nest
from alf.algorithms.rl_algorithm import LearningSetup, RLAlgorithm
from alf.data_structures import AlgStep, Experience, Segment, TimeStep, Trajectory
from alf.data_transformers import DataTransformerChain

__all__ = ["MultiPolicyAlgorithm"]


def _rows(tree: Any, index: torch.Tensor) -> Any:
    """Rows ``index`` of every ``[B, ...]`` leaf of ``tree``."""
    return nest.map_structure(lambda x: x[index], tree)


def _columns(tree: Any, index: torch.Tensor) -> Any:
    """Columns ``index`` (batch entries) of every ``[T, B, ...]`` leaf of ``tree``."""
    return nest.map_structure(lambda x: x[:, index], tree)


def _scatter(parts: Sequence[tuple[torch.Tensor, Any]], batch_size: int) -> Any:
    """One ``[batch_size, ...]`` nest from ``(rows, nest of [len(rows), ...])`` parts."""

    def combine(*leaves: torch.Tensor) -> torch.Tensor:
        out = leaves[0].new_empty((batch_size, *leaves[0].shape[1:]))
        for (index, _), leaf in zip(parts, leaves, strict=True):
            out[index] = leaf
        return out

    return nest.map_structure(combine, *[tree for _, tree in parts])


class MultiPolicyAlgorithm(RLAlgorithm):
    """One algorithm per policy, each acting and learning on the rows of its agents (see
    the module docstring).

    Args:
        observation_spec: nest of specs of one (transformed) observation.
        action_spec: nest of bounded specs of one action.
        algorithm_ctor: builds each policy's algorithm
            (``algorithm_ctor(observation_spec=, action_spec=)``).
        policy_names: the policies, in order.
        agent_policies: for each agent of the game (in row order within a game), the
            index of its policy in ``policy_names``.
        frozen: policies that act but never learn.
    """

    def __init__(
        self,
        *,
        observation_spec: Any,
        action_spec: Any,
        algorithm_ctor: Callable[..., RLAlgorithm],
        policy_names: Sequence[str],
        agent_policies: Sequence[int],
        frozen: Sequence[str] = (),
    ) -> None:
        super().__init__(observation_spec=observation_spec, action_spec=action_spec)
        if not policy_names or len(set(policy_names)) != len(policy_names):
            raise ValueError(f"policy_names must be distinct and non-empty, got {policy_names}")
        unknown = sorted(set(frozen) - set(policy_names))
        if unknown:
            raise ValueError(f"frozen policies {unknown} are not among {list(policy_names)}")
        if set(frozen) == set(policy_names):
            raise ValueError(f"every policy is frozen ({list(frozen)}): one must learn")
        self.policies = nn.ModuleDict(
            {
                name: algorithm_ctor(observation_spec=observation_spec, action_spec=action_spec)
                for name in policy_names
            }
        )
        kinds = {type(algorithm).__name__ for algorithm in self.policies.values()}
        if len(kinds) > 1:
            raise ValueError(f"every policy must be built by one algorithm class, got {kinds}")
        self.policy_names = tuple(policy_names)
        self.frozen = frozenset(frozen)
        self.register_buffer(
            "agent_policy",
            torch.as_tensor(list(agent_policies), dtype=torch.int64),
            persistent=False,
        )
        self.record_statistics = True

    # ------------------------------------------------------------------ specs
    @property
    def _first(self) -> RLAlgorithm:
        return next(iter(self.policies.values()))

    @property
    def predict_state_spec(self) -> Any:
        return self._first.predict_state_spec

    @property
    def rollout_state_spec(self) -> Any:
        return self._first.rollout_state_spec

    @property
    def train_state_spec(self) -> Any:
        return self._first.train_state_spec

    @property
    def needs_every_step(self) -> bool:  # type: ignore[override]
        return any(algorithm.needs_every_step for algorithm in self.policies.values())

    def set_data_transformer(self, transformer: DataTransformerChain) -> None:
        """Installs ``transformer`` here and in every policy (one chain: the policies
        share its statistics)."""
        super().set_data_transformer(transformer)
        for algorithm in self.policies.values():
            algorithm.set_data_transformer(transformer)

    # ------------------------------------------------------------------ acting
    def _groups(self, env_id: torch.Tensor) -> Iterator[tuple[str, RLAlgorithm, torch.Tensor]]:
        """Each policy with the batch rows of its agents (policies without rows
        skipped)."""
        policy_of_row = self.agent_policy.to(env_id.device)[env_id % len(self.agent_policy)]
        for i, (name, algorithm) in enumerate(self.policies.items()):
            index = torch.nonzero(policy_of_row == i).squeeze(1)
            if index.numel():
                yield name, algorithm, index

    def _dispatch(self, hook: str, time_step: TimeStep, state: Any) -> AlgStep:
        parts = [
            (index, getattr(algorithm, hook)(_rows(time_step, index), _rows(state, index)))
            for _, algorithm, index in self._groups(time_step.env_id)
        ]
        if len(parts) == 1 and parts[0][0].numel() == time_step.env_id.numel():
            return parts[0][1]
        return _scatter(parts, time_step.env_id.shape[0])

    def predict_step(self, time_step: TimeStep, state: Any) -> AlgStep:
        return self._dispatch("predict_step", time_step, state)

    def rollout_step(self, time_step: TimeStep, state: Any) -> AlgStep:
        return self._dispatch("rollout_step", time_step, state)

    @contextlib.contextmanager
    def rollout_session(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for algorithm in self.policies.values():
                stack.enter_context(algorithm.rollout_session())
            yield

    # ------------------------------------------------------------------ learning
    def _share(self, index: int) -> float:
        """The fraction of the agents (rows) mapped to policy ``index``."""
        return float((self.agent_policy == index).float().mean())

    def prepare_learning(self, setup: LearningSetup) -> None:
        """Prepares each policy for its share of the rows (and of the initial
        collection)."""
        for i, algorithm in enumerate(self.policies.values()):
            share = self._share(i)
            algorithm.prepare_learning(
                dataclasses.replace(
                    setup,
                    num_envs=max(round(setup.num_envs * share), 1),
                    initial_collect_steps=round(setup.initial_collect_steps * share),
                )
            )

    def _local_env_ids(self, env_id: torch.Tensor, policy: int) -> torch.Tensor:
        """The env ids of a policy's rows among its own rows: agent ``a`` of game ``g``,
        the ``k``-th agent mapped to the policy, is row ``g * n + k`` of the policy's
        ``n`` agents per game (what its replay buffer, sized for its rows, indexes)."""
        mine = self.agent_policy == policy
        position = torch.cumsum(mine.long(), 0) - 1
        num_agents = len(self.agent_policy)
        position = position.to(env_id.device)
        return (env_id // num_agents) * int(mine.sum()) + position[env_id % num_agents]

    def _rows_of(self, trajectory: Trajectory, policy: int) -> Trajectory | None:
        """The trajectory's rows of policy ``policy``'s agents (None if it has none),
        with env ids among its own rows."""
        segments, rows, total = [], 0, 0
        for segment in trajectory:
            env_id = segment.exp.env_id[0]
            total += env_id.numel()
            agent = env_id % len(self.agent_policy)
            index = torch.nonzero(self.agent_policy.to(env_id.device)[agent] == policy).squeeze(1)
            if index.numel():
                exp = _columns(segment.exp, index)
                exp = exp._replace(env_id=self._local_env_ids(exp.env_id, policy))
                segments.append(Segment(exp=exp, num_old_rows=segment.num_old_rows))
                rows += index.numel()
        if not segments:
            return None
        env_steps = trajectory.env_steps * rows // max(total, 1)
        return Trajectory(segments=tuple(segments), env_steps=env_steps)

    def learn(self, trajectory: Trajectory) -> dict[str, float]:
        """Trains every policy that is not frozen on its agents' rows; its scalars are
        reported as ``<policy>/<name>``."""
        stats: dict[str, float] = {}
        for i, (name, algorithm) in enumerate(self.policies.items()):
            part = None if name in self.frozen else self._rows_of(trajectory, i)
            if part is None:
                continue
            algorithm.record_statistics = self.record_statistics
            stats.update({f"{name}/{k}": v for k, v in algorithm.learn(part).items()})
        return stats

    def preprocess_experience(self, exp: Experience) -> Experience:
        return exp

    def data_checkpoint_state(self) -> Any:
        states = {
            name: algorithm.data_checkpoint_state() for name, algorithm in self.policies.items()
        }
        return states if any(state is not None for state in states.values()) else None

    def load_data_checkpoint_state(self, state: Any) -> None:
        for name, algorithm in self.policies.items():
            algorithm.load_data_checkpoint_state((state or {}).get(name))

    # ------------------------------------------------------------------ optimizers
    def _learning(self) -> Iterator[tuple[str, RLAlgorithm]]:
        """The policies that are not frozen, by name."""
        return ((n, a) for n, a in self.policies.items() if n not in self.frozen)

    @property
    def learning_policies(self) -> dict[str, RLAlgorithm]:
        """The policies that are not frozen, by name: each makes its own updates (a
        data-parallel run averages each one's gradients over the ranks separately)."""
        return dict(self._learning())

    @property
    def optimizer(self) -> torch.optim.Optimizer:  # type: ignore[override]
        """The first learning policy's optimizer (each learning policy has its own; see
        :meth:`checkpoint_state`)."""
        return next(self._learning())[1].optimizer

    @property
    def optimized_parameters(self) -> list[torch.Tensor]:  # type: ignore[override]
        return [p for _, algorithm in self._learning() for p in algorithm.optimized_parameters]

    @property
    def learning_rate(self) -> float:  # type: ignore[override]
        return self.optimizer.param_groups[0]["lr"]

    def set_progress(self, progress: float) -> None:
        for _, algorithm in self._learning():
            algorithm.set_progress(progress)

    def configure_training(self, **kwargs: Any) -> None:
        """Configures every policy alike, without data parallelism: each learning policy
        makes its own updates, so each needs its own ``data_parallel`` (over its own
        parameters; :func:`alf.trainers.data_parallel.enable_data_parallel` gives them)."""
        if kwargs.get("data_parallel") is not None:
            raise ValueError(
                "MultiPolicyAlgorithm: one data_parallel for all policies; configure each of "
                "learning_policies with its own"
            )
        for algorithm in self.policies.values():
            algorithm.configure_training(**kwargs)

    @property
    def num_skipped_updates(self) -> int:  # type: ignore[override]
        return sum(algorithm.num_skipped_updates for algorithm in self.policies.values())

    def checkpoint_state(self) -> dict[str, Any]:
        """Parameters and statistics of every policy (``module``), and each learning
        policy's optimizer state (``optimizer``, by policy name)."""
        return {
            "module": self.state_dict(),
            "optimizer": {name: a.optimizer.state_dict() for name, a in self._learning()},
        }

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        self.load_state_dict(state["module"])
        for name, algorithm in self._learning():
            algorithm.optimizer.load_state_dict(state["optimizer"][name])
