"""Tests of the environment-backend registry: built-in names and a config's own backend."""

from __future__ import annotations

import gin
import gymnasium as gym
import pytest

from alf.config import configurable
from alf.environments import create_environment
from alf.environments.backends import BACKENDS, BackendRequest
from alf.environments.create_environment import VECTORIZATION_MODES
from alf.environments.gymnasium_environment import GymnasiumEnvironment

REQUESTS: list[BackendRequest] = []


@configurable
def recording_backend(request: BackendRequest) -> GymnasiumEnvironment:
    """A backend of a user's own: Gymnasium's async vector env, recording its request."""
    REQUESTS.append(request)
    vector_env = gym.make_vec(
        request.env_name, num_envs=request.num_envs, vectorization_mode="async"
    )
    return GymnasiumEnvironment(vector_env=vector_env, seed=request.seed)


def test_the_built_in_backends_are_the_vectorization_modes() -> None:
    assert VECTORIZATION_MODES == ("sync", "vector_entry_point", "envpool", "subprocess")
    assert tuple(BACKENDS) == VECTORIZATION_MODES
    with pytest.raises(TypeError):
        BACKENDS["mine"] = recording_backend  # type: ignore[index]  # read-only


def test_an_unknown_mode_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"vectorization_mode must be one of .*'sync'.*got 'fast'"):
        create_environment("CartPole-v1", 1, vectorization_mode="fast")


def test_a_config_can_name_its_own_backend() -> None:
    REQUESTS.clear()
    gin.parse_config(["create_environment.vectorization_mode = @recording_backend"])
    env = create_environment("CartPole-v1", 4, seed=7, num_ranks=2, rank=1)
    try:
        time_step = env.reset()
        assert env.batch_size == 2 and time_step.observation.shape == (2, 4)
    finally:
        env.close()
    (request,) = REQUESTS
    # This rank's share of the environments, seeded as in every backend.
    assert request.num_envs == 2 and request.seed == 9 and not request.for_evaluation
    assert request.load_args["training"] is True
